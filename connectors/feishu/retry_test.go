package feishu_test

import (
	"net/http"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

// A failure of ours (chat.Response.Retry: the store was unavailable) is
// answered with an error, not 200, so Feishu delivers the event again; the
// asker is told nothing of it.
func TestOurFailureIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	b := newBare(t, nil)
	b.rec.answer = chat.Response{Retry: true}
	bot := feishutest.Mention{Key: "@_user_1", OpenID: b.fake.BotOpenID(), Name: "roombridge"}
	id, err := b.fake.PushEvent(b.ctx(), feishutest.MessageEvent{EventID: "ev_1", SenderOpenID: member, ChatID: chatID,
		Text: "@_user_1 coder: hi", Mentions: []feishutest.Mention{bot}}.JSON())
	if err != nil {
		t.Fatal(err)
	}
	b.wait("the frame's answer", func() bool { return len(b.fake.Responses(id)) > 0 })
	if r := b.fake.Responses(id)[0]; r.StatusCode == http.StatusOK {
		t.Errorf("the event the core failed on was answered 200")
	}
	if n := len(b.rec.all()); n != 1 {
		t.Errorf("%d events reached the core, want 1", n)
	}
	if ms := b.fake.Messages(); len(ms) != 0 {
		t.Errorf("the bridge sent %d messages, want none: %+v", len(ms), ms)
	}
}
