package feishu_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/requests"
)

// gate is a core whose Handle of an event with "gated" in its text waits
// until the gate opens; it records when each event enters and leaves the
// core ("enter:<label>", "leave:<label>"; the label is the text, or
// "click:<action>" for a click).
type gate struct {
	open    chan struct{}
	entered chan struct{} // closed when the first gated event is in Handle
	once    sync.Once

	trace syncbuf.Trace
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan struct{})} }

func label(ev chat.Event) string {
	if ev.Click != nil {
		return "click:" + ev.Click.ActionID
	}
	return ev.Text
}

func (g *gate) wrap(core chat.Handler) chat.Handler {
	return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
		g.trace.Add("enter:" + label(ev))
		defer g.trace.Add("leave:" + label(ev))
		if strings.Contains(ev.Text, "gated") {
			g.once.Do(func() { close(g.entered) })
			select {
			case <-g.open:
			case <-ctx.Done():
			}
		}
		return core.Handle(ctx, ev)
	})
}

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitFor):
		t.Fatal("the gated event never reached the core")
	}
}

// Two events of one topic delivered at the same time (a reply the core
// holds, then a click on the approval card posted in that topic) reach the
// core in the order they arrived: the click waits until the reply has left
// the core (it is acknowledged at its budget meanwhile, and its decision
// lands afterwards); a reply in another topic is not held behind them.
func TestEventsOfOneTopicKeepTheirOrder(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			h := newHarness(t, setup{mode: mode, handler: g.wrap,
				conn: func(o *feishu.Options) { o.AckBudget = 200 * time.Millisecond }})
			t.Cleanup(func() {
				select {
				case <-g.open:
				default:
					close(g.open) // before the harness stops (its workers drain)
				}
			})
			h.deliverUntilOK(h.askEvent(member, "coder echo held topic")) // pending: its approval card goes into its topic
			h.deliverUntilOK(h.askEvent(owner, "coder echo other topic"))
			var held, other *requests.Request
			h.waitStore("both requests", func() bool { return len(h.requests()) == 2 })
			for _, r := range h.requests() {
				if r.Ask == "echo held topic" {
					held = r
				} else {
					other = r
				}
			}
			var root, otherRoot, card feishutest.Message
			h.waitFake("both topics and the approval card in the first", func() bool {
				ps, qs := h.parents(held.ID.String()), h.parents(other.ID.String())
				if len(ps) != 1 || len(qs) != 1 {
					return false
				}
				root, otherRoot = ps[0], qs[0]
				for _, m := range h.approvalCards(held.ID.String()) {
					if m.RootID == root.ID {
						card = m
						return true
					}
				}
				return false
			})
			root, _ = h.fake.Message(root.ID) // with its thread ID

			if code, _, _ := h.send(h.replyEvent(member, root, "first gated")); code == 200 {
				t.Fatal("the held reply was acknowledged before the core stored it")
			}
			g.waitEntered(t)
			ans := h.click(feishutest.CardAction{EventID: h.eventID(), Token: vtoken, AppID: h.appID, OperatorOpenID: approver,
				Value: button(t, card.Content, "approve"), MessageID: card.ID, ChatID: chatID}.JSON())
			if g.trace.Has("enter:click:approve") {
				t.Fatalf("the click reached the core while the topic's reply was held: %q", g.trace.Lines())
			}
			if ans.Toast == nil || ans.Toast.Type != "info" {
				t.Errorf("the queued click answered %+v, want the toast that it is under way", ans)
			}
			h.send(h.replyEvent(member, otherRoot, "in the other topic")) // 200, or an error if a loaded core outlasts the budget
			g.trace.Await(t, "leave:in the other topic", waitFor)
			if g.trace.Has("leave:first gated") || g.trace.Has("enter:click:approve") {
				t.Fatalf("trace %q: the held topic moved before its gate opened", g.trace.Lines())
			}

			close(g.open)
			g.trace.Await(t, "leave:click:approve", waitFor)
			tr := g.trace.Lines()
			if i, j := slices.Index(tr, "leave:first gated"), slices.Index(tr, "enter:click:approve"); i < 0 || j < i {
				t.Errorf("trace %q: the click entered the core before the reply left it", tr)
			}
			h.waitStore("the approval to land", func() bool {
				r, err := h.svc.Get(h.ctx(), held.ID)
				return err == nil && r.State != requests.Pending
			})
		})
	}
}
