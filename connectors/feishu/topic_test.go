package feishu_test

import (
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

// A card re-rendered through Update (an approval card's time-left notice,
// which keeps its buttons) keeps the topic it was posted in: its buttons
// still name the topic, so a click on it takes the topic's lane and keeps
// its order with the topic's replies. So does the topic's root card, the
// root of its own topic; a card in a direct chat names none.
func TestUpdatedCardKeepsItsTopic(t *testing.T) {
	b := newBare(t, nil)
	ctx := b.ctx()
	card := func(status string) chat.Message {
		return chat.Message{Kind: "approval", Card: &chat.Card{Title: "R-01 needs approval", Status: status, BlockID: "approval:R-01:1",
			Buttons: []chat.Button{{ActionID: "approve", Label: "Approve", Value: "R-01"}}}}
	}
	thread, root, err := b.conn.StartThread(ctx, chatID, card("pending"))
	if err != nil {
		t.Fatal(err)
	}
	inTopic, err := b.conn.Reply(ctx, thread, card("waiting"))
	if err != nil {
		t.Fatal(err)
	}
	dm, err := b.conn.Direct(ctx, approver, card("waiting"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		ref   chat.MessageRef
		topic string
	}{{"in the topic", inTopic, thread.ID}, {"the root", root, thread.ID}, {"in a direct chat", dm, ""}} {
		if err := b.conn.Update(ctx, c.ref, card("expires in 5 minutes")); err != nil {
			t.Fatal(err)
		}
		m, ok := b.fake.Message(c.ref.ID)
		if !ok {
			t.Fatalf("%s: no message %s", c.name, c.ref.ID)
		}
		value := button(t, m.Current, "approve")
		if got, _ := value["topic"].(string); got != c.topic {
			t.Errorf("%s: the updated card's button names topic %q, want %q", c.name, got, c.topic)
		}
		seen := len(b.rec.all())
		if _, err := b.fake.PushCardAction(ctx, feishutest.CardAction{EventID: "ev_click_" + c.ref.ID, Token: vtoken, AppID: b.app,
			OperatorOpenID: approver, Value: value, MessageID: c.ref.ID, ChatID: c.ref.Channel}.JSON()); err != nil {
			t.Fatal(err)
		}
		b.wait("the click", func() bool { return len(b.rec.all()) > seen })
		ev := b.rec.all()[seen]
		want := "card:approval:R-01:1"
		if c.topic != "" {
			want = "thread:" + c.ref.Channel + "/" + c.topic
		}
		if ev.Lane() != want {
			t.Errorf("%s: the click on the updated card takes lane %q, want %q", c.name, ev.Lane(), want)
		}
	}
}
