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
			dm := h.dmCard()
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

// A core slower than the ack budget does not keep Slack waiting past it,
// and an event it holds is not lost to a crash: the event is left
// unacknowledged when its budget runs out (HTTP 503; an envelope without its
// ack), and that is logged, while its handling goes on; Slack's redelivery of
// it (the same event_id) is acknowledged and makes no second request. A
// click, which Slack does not deliver again, is acknowledged when its budget
// runs out, and its decision lands when the core gets to it. Nobody is told
// anything of it.
func TestAckBudget(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			stuck := func(core chat.Handler) chat.Handler {
				return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
					if strings.Contains(ev.Text, "stuck") || ev.Kind == chat.Click {
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					return core.Handle(ctx, ev)
				})
			}
			h := newHarness(t, fast(setup{mode: mode, handler: stuck,
				conn: func(o *slack.Options) { o.AckBudget = ackBudget }}))
			unblock := sync.OnceFunc(func() { close(release) })
			t.Cleanup(unblock)                      // before the harness stops (its workers drain)
			h.mention(member, "coder echo warm-up") // the connector runs; pending, its card in the DM
			h.waitStore("the warm-up request", func() bool { return len(h.requests()) == 1 })
			warm := h.requests()[0]
			card := h.dmCard()

			redeliver := h.stuckEvent(t)
			h.stuckClick(t, card, warm.ID.String())
			unblock()
			h.waitStore("the stuck event's request and the click's decision", func() bool {
				r, err := h.svc.Get(h.ctx(), warm.ID)
				return err == nil && r.State != requests.Pending && len(h.requests()) == 2
			})
			redeliver()
			asks := 0
			for _, r := range h.requests() {
				if r.Ask == "echo stuck" {
					asks++
				}
			}
			if n := len(h.requests()); n != 2 || asks != 1 {
				t.Errorf("%d requests, %d of the stuck event: want 2 and 1", n, asks)
			}
			for _, m := range h.fake.Ephemerals() {
				t.Errorf("%s was told %q", m.User, m.Text)
			}
		})
	}
}

// ackBudget is the ack budget of TestAckBudget.
const ackBudget = 300 * time.Millisecond

// inBudget checks that Slack was answered took after the event came (as
// the fake recorded it, where it takes part: Socket Mode): not before the
// ack budget ran out. That the connector did not wait for the core past it
// shows in that the answer came at all: the core holds the event until
// after it. How much later than the budget a loaded machine answers is no
// fault of the connector's, and is not checked.
func inBudget(t *testing.T, what string, took time.Duration) {
	t.Helper()
	if took < ackBudget {
		t.Errorf("%s answered after %s, before its %s budget ran out", what, took, ackBudget)
	}
}

// stuckEvent delivers a mention the core holds: Slack gets no ack for it
// when its budget runs out (503; the envelope unacknowledged), and nothing is
// stored yet. It returns Slack's redelivery of it, to be called once the
// core has handled it, which checks that the redelivery is acknowledged
// (and, in Socket Mode, that the first envelope never was).
func (h *harness) stuckEvent(t *testing.T) (redeliver func()) {
	t.Helper()
	raw := "<@" + slacktest.BotUserID + "> coder echo stuck"
	ts, err := h.fake.AddUserMessage(channel, member, raw, "")
	if err != nil {
		t.Fatal(err)
	}
	body := slacktest.AppMentionEvent("EvSTUCK", channel, member, raw, ts, "")
	if h.s.mode == slack.ModeEvents {
		code, took := h.postOnce("/slack/events", body, "application/json", 0)
		if code != http.StatusServiceUnavailable {
			t.Errorf("POST /slack/events of the stuck event: %d, want 503", code)
		}
		inBudget(t, "the stuck event", took)
		redeliver = func() {
			if code, _ := h.postOnce("/slack/events", body, "application/json", 1); code != http.StatusOK {
				t.Errorf("Slack's retry of the stuck event (X-Slack-Retry-Num: 1): %d, want 200", code)
			}
		}
	} else {
		env, err := h.fake.PushEventsAPI(h.ctx(), body)
		if err != nil {
			t.Fatal(err)
		}
		h.until("the stuck event's budget", func() bool { return h.late("EvSTUCK") > 0 })
		inBudget(t, "the stuck event", time.Since(h.envelope(env).SentAt))
		redeliver = func() {
			again, err := h.fake.Redeliver(h.ctx(), env) // retry_attempt 1, the same event
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.fake.WaitAck(h.ctx(), again); err != nil {
				t.Fatal(err)
			}
			if h.fake.Acked(env) {
				t.Errorf("the stuck event's first envelope was acknowledged")
			}
		}
	}
	if n := len(h.requests()); n != 1 {
		t.Errorf("%d requests when the budget ran out: the stuck core stored its event", n)
	}
	if !strings.Contains(h.logs.String(), "ack budget ran out: left unacknowledged for Slack to deliver again") || h.late("EvSTUCK") != 1 {
		t.Errorf("the budget run out was not logged:\n%s", h.logs.String())
	}
	return redeliver
}

// stuckClick clicks Approve on card (request id's, in the approver's DM)
// while the core holds clicks: it is acknowledged when its budget runs out.
func (h *harness) stuckClick(t *testing.T, card slacktest.Message, id string) {
	t.Helper()
	payload := slacktest.BlockActionsPayload(owner, card.Channel, card.TS, "", actionsBlockID(t, card), "approve", id)
	if h.s.mode == slack.ModeEvents {
		code, took := h.postOnce("/slack/interactivity", []byte(slacktest.InteractivityForm(payload).Encode()),
			"application/x-www-form-urlencoded", 0)
		if code != http.StatusOK {
			t.Errorf("POST /slack/interactivity of the stuck click: %d, want 200", code)
		}
		inBudget(t, "the stuck click", took)
	} else {
		env, err := h.fake.PushInteractive(h.ctx(), payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.fake.WaitAck(h.ctx(), env); err != nil {
			t.Fatal(err)
		}
		inBudget(t, "the stuck click", h.envelope(env).Latency())
	}
	if !strings.Contains(h.logs.String(), "ack budget ran out: acknowledged before the core stored it") {
		t.Errorf("the click's late ack was not logged:\n%s", h.logs.String())
	}
}

// envelope is the fake's record of Socket Mode envelope id.
func (h *harness) envelope(id string) slacktest.Envelope {
	h.t.Helper()
	for _, e := range h.fake.Envelopes() {
		if e.ID == id {
			return e
		}
	}
	h.t.Fatalf("no envelope %s", id)
	return slacktest.Envelope{}
}

// dmCard waits for the approval card in the approver's DM.
func (h *harness) dmCard() slacktest.Message {
	h.t.Helper()
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
	return dm
}
