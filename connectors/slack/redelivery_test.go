package slack_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// A command slower than the ack budget is left unacknowledged, and Slack
// delivers it again: the redelivery is acknowledged without running the
// command again, and the asker is told its answer once ("R-07 cancelled",
// not then "R-07 has already ended"), with no refusal audited. So too when
// the redelivery comes to a new instance on the same store (a restart, a
// failover): the core recorded the command under its event's dedupe key.
// A command that only reads ("show") is answered once too.
func TestSlowCommandIsToldOnce(t *testing.T) {
	for _, mode := range modes {
		for _, c := range []struct {
			name, verb, want string
			restart          bool
		}{
			{"cancel", "cancel", " cancelled", false},
			{"cancel after a restart", "cancel", " cancelled", true},
			{"show", "show", " · coder · ", false},
		} {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				release := make(chan struct{})
				held := func(core chat.Handler) chat.Handler {
					return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
						if strings.HasPrefix(ev.Text, c.verb+" ") {
							select {
							case <-release:
							case <-ctx.Done():
							}
						}
						return core.Handle(ctx, ev)
					})
				}
				h := newHarness(t, fast(setup{mode: mode, handler: held,
					conn: func(o *slack.Options) { o.AckBudget = ackBudget }}))
				unblock := sync.OnceFunc(func() { close(release) })
				t.Cleanup(unblock)
				h.mention(member, "coder echo to be cancelled")
				h.waitStore("the request", func() bool { return len(h.requests()) == 1 })
				rid := h.requests()[0].ID
				id := rid.String()

				body := h.mentionEvent(member, c.verb+" "+id)
				redeliver := h.unacked(t, body)
				unblock()
				h.waitFake("the answer", func(s *slacktest.Server) bool { return len(s.Ephemerals()) > 0 })
				if c.restart {
					h.restart()
				}
				redeliver()
				// The asker's next event takes the same lane: once it is
				// acknowledged, the redelivery's handling and telling are done.
				h.mention(member, "coder echo after")

				var told []string
				for _, m := range h.fake.Ephemerals() {
					told = append(told, m.Text)
				}
				if len(told) != 1 || !strings.Contains(told[0], id+c.want) {
					t.Errorf("the asker was told %q, want once %q", told, id+c.want)
				}
				if c.verb == "cancel" {
					if r, err := h.svc.Get(h.ctx(), rid); err != nil || r.State != requests.Cancelled {
						t.Errorf("%s: %+v (%v), want it cancelled", id, r, err)
					}
				}
				recs, err := audit.List(h.ctx(), h.db, audit.Query{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if strings.HasSuffix(r.Action, "_refused") {
						t.Errorf("a refusal was audited: %+v", r)
					}
				}
			})
		}
	}
}

// unacked delivers body, which the core holds past the ack budget: Slack
// gets no ack (a 503; the envelope left without its ack). It returns
// Slack's redelivery of it, which checks that it is acknowledged.
func (h *harness) unacked(t *testing.T, body []byte) (redeliver func()) {
	t.Helper()
	ev := eventIDOf(t, body)
	if h.s.mode == slack.ModeEvents {
		if code, _ := h.postOnce("/slack/events", body, "application/json", 0); code != http.StatusServiceUnavailable {
			t.Fatalf("POST /slack/events of the held command: %d, want 503", code)
		}
		return func() {
			// Again while 503: a new instance may not run yet.
			if resp := h.post("/slack/events", body, "application/json", time.Now(), 1); resp.StatusCode != http.StatusOK {
				t.Errorf("Slack's retry of the command: %d, want 200", resp.StatusCode)
			}
		}
	}
	env, err := h.fake.PushEventsAPI(h.ctx(), body)
	if err != nil {
		t.Fatal(err)
	}
	h.until("the command's budget", func() bool { return h.late(ev) > 0 })
	return func() {
		again, err := h.fake.Redeliver(h.ctx(), env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.fake.WaitAck(h.ctx(), again); err != nil {
			t.Fatal(err)
		}
	}
}
