package slack_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// A failure of ours (chat.Response.Retry: the store was unavailable) is not
// acknowledged (webhook: 503; Socket Mode: no ack), so Slack delivers the
// event again, and the redelivery makes the request, once. The asker is
// told nothing of the failure.
func TestOurFailureIsNotAcknowledged(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			failed := make(chan struct{})
			outage := func(core chat.Handler) chat.Handler {
				return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
					if calls.Add(1) == 1 {
						defer close(failed)
						return chat.Response{Retry: true}
					}
					return core.Handle(ctx, ev)
				})
			}
			h := newHarness(t, fast(setup{mode: mode, handler: outage}))
			if mode == slack.ModeEvents {
				h.mention(member, "coder echo after an outage") // 503, then 200 on the redelivery
			} else {
				raw := "<@" + slacktest.BotUserID + "> coder echo after an outage"
				ts, err := h.fake.AddUserMessage(channel, member, raw, "")
				if err != nil {
					t.Fatal(err)
				}
				body := slacktest.AppMentionEvent(h.eventID(), channel, member, raw, ts, "")
				first, err := h.fake.PushEventsAPI(h.ctx(), body)
				if err != nil {
					t.Fatal(err)
				}
				<-failed
				again, err := h.fake.PushEventsAPI(h.ctx(), body) // Slack's redelivery
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.fake.WaitAck(h.ctx(), again); err != nil {
					t.Fatal(err)
				}
				if h.fake.Acked(first) {
					t.Errorf("the envelope the core failed on was acknowledged")
				}
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("the core was called %d times, want 2 (the failure, the redelivery)", n)
			}
			if rs := h.requests(); len(rs) != 1 {
				t.Errorf("%d requests, want 1", len(rs))
			}
			for _, m := range h.fake.Ephemerals() {
				t.Errorf("the asker was told %q", m.Text)
			}
		})
	}
}
