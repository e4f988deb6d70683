package slack_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// slowCore is a core that takes d longer to handle each event (a slow
// disk), within the ack budget.
func slowCore(d time.Duration) func(chat.Handler) chat.Handler {
	return func(core chat.Handler) chat.Handler {
		return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return core.Handle(ctx, ev)
		})
	}
}

// When Slack gets its ack (HTTP 200, the envelope's ack) the event is
// stored: the mention's request exists, and the approver's click has decided
// it, even with a core that takes 100 ms more per event. (A crash right after
// the ack loses nothing; Slack would not deliver the event again.)
func TestAckAfterStore(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fast(setup{mode: mode, handler: slowCore(100 * time.Millisecond)}))
			h.mention(member, "coder echo stored before the ack") // returns once acknowledged
			rs := h.requests()
			if len(rs) != 1 || rs[0].State != requests.Pending {
				t.Fatalf("at the ack: requests %+v, want one pending", rs)
			}
			id := rs[0].ID.String()
			var dm slacktest.Message
			h.waitFake("the approval card in the approver's DM", func(s *slacktest.Server) bool {
				for _, m := range s.Messages() {
					if m.Channel == "D"+owner && hasButtons(m) {
						dm = m
						return true
					}
				}
				return false
			})
			h.click(slacktest.BlockActionsPayload(owner, dm.Channel, dm.TS, "", actionsBlockID(t, dm), "approve", id))
			r, err := h.svc.Get(h.ctx(), rs[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.State == requests.Pending {
				t.Errorf("at the click's ack the request is still pending")
			}
			if strings.Contains(h.logs.String(), "ack budget ran out") {
				t.Errorf("an event waited out the ack budget:\n%s", h.logs.String())
			}
		})
	}
}

// A core slower than the ack budget does not keep Slack waiting past it: the
// event is acknowledged when the budget runs out (and that is logged), and
// handled when the core gets to it.
func TestAckBudget(t *testing.T) {
	const budget = 300 * time.Millisecond
	const margin = 700 * time.Millisecond // a loaded 2-core machine, -race
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			stuck := func(core chat.Handler) chat.Handler {
				return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
					if strings.Contains(ev.Text, "stuck") {
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					return core.Handle(ctx, ev)
				})
			}
			h := newHarness(t, fast(setup{mode: mode, handler: stuck,
				conn: func(o *slack.Options) { o.AckBudget = budget }}))
			unblock := sync.OnceFunc(func() { close(release) })
			t.Cleanup(unblock)                      // before the harness stops (its workers drain)
			h.mention(member, "coder echo warm-up") // the connector runs
			h.waitStore("the warm-up request", func() bool { return len(h.requests()) == 1 })

			raw := "<@" + slacktest.BotUserID + "> coder echo stuck"
			ts, err := h.fake.AddUserMessage(channel, member, raw, "")
			if err != nil {
				t.Fatal(err)
			}
			body := slacktest.AppMentionEvent("EvSTUCK", channel, member, raw, ts, "")
			var took time.Duration
			if mode == slack.ModeEvents {
				start := time.Now()
				resp := h.post("/slack/events", body, "application/json", time.Now(), 0)
				took = time.Since(start)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("POST /slack/events: %d", resp.StatusCode)
				}
			} else {
				env, err := h.fake.PushEventsAPI(h.ctx(), body)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.fake.WaitAck(h.ctx(), env); err != nil {
					t.Fatal(err)
				}
				for _, e := range h.fake.Envelopes() {
					if e.ID == env {
						took = e.Latency()
					}
				}
			}
			if took < budget || took > budget+margin {
				t.Errorf("acknowledged after %s with a %s budget, want within %s of it", took, budget, margin)
			}
			if n := len(h.requests()); n != 1 {
				t.Errorf("%d requests at the ack: the stuck core stored its event", n)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "ack budget ran out") || !strings.Contains(logs, "event_id=EvSTUCK") {
				t.Errorf("the late ack was not logged:\n%s", logs)
			}
			unblock()
			h.waitStore("the stuck event's request", func() bool { return len(h.requests()) == 2 })
		})
	}
}
