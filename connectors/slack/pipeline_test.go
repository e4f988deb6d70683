package slack_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/internal/syncbuf"
)

// gate is a core whose Handle of an event with "gated" in its text waits
// until the gate opens; it records when each event enters and leaves the
// core ("enter:<text>", "leave:<text>").
type gate struct {
	open    chan struct{}
	entered chan struct{} // closed when the first gated event is in Handle
	once    sync.Once

	trace syncbuf.Trace
}

func newGate() *gate {
	return &gate{open: make(chan struct{}), entered: make(chan struct{})}
}

func (g *gate) wrap(core chat.Handler) chat.Handler {
	return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
		g.trace.Add("enter:" + ev.Text)
		defer g.trace.Add("leave:" + ev.Text)
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

// pipelined is a harness whose core holds gated events at g, with a short
// ack budget (Slack is answered at the latest 200 ms after a delivery
// arrived, so a held event does not hold the test's delivery: it is left
// unacknowledged, see harness.deliverUnacked, and handled when the gate
// opens).
func pipelined(t *testing.T, mode string, g *gate) *harness {
	h := newHarness(t, fast(setup{mode: mode, handler: g.wrap,
		conn: func(o *slack.Options) { o.AckBudget = 200 * time.Millisecond }}))
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open) // before the harness stops (its workers drain)
		}
	})
	return h
}

// Two people's top-level mentions in one channel need no order between them
// (each starts a request and a thread of its own): while the core holds the
// first, the second is handled, its request stored, and acknowledged.
func TestTopLevelMentionsHandledConcurrently(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			h := pipelined(t, mode, g)
			h.deliverUnacked(h.mentionEvent(member, "coder echo gated")) // left unacknowledged at the budget
			g.waitEntered(t)
			h.mention(owner, "coder echo second")
			g.trace.Await(t, "leave:coder echo second", waitFor)
			if g.trace.Has("leave:coder echo gated") {
				t.Fatal("the gated mention left the core before the gate opened")
			}
			if rs := h.requests(); len(rs) != 1 || rs[0].Ask != "echo second" {
				t.Fatalf("while the first mention is held: requests %+v, want the second's alone", rs)
			}
			close(g.open)
			h.waitStore("both requests", func() bool { return len(h.requests()) == 2 })
		})
	}
}

// inOrder sends first (gated: the core holds it) and then second (queued,
// not refused: its budget runs out behind first), and checks that second
// reaches the core only once first has left it.
func inOrder(t *testing.T, g *gate, what string, sendFirst func(), first string, sendSecond func(), second string) {
	t.Helper()
	sendFirst()
	g.waitEntered(t)
	sendSecond()
	if g.trace.Has("enter:" + second) {
		t.Fatalf("the second %s reached the core while the first was held: %q", what, g.trace.Lines())
	}
	close(g.open)
	g.trace.Await(t, "leave:"+second, waitFor)
	tr := g.trace.Lines()
	if i, j := slices.Index(tr, "leave:"+first), slices.Index(tr, "enter:"+second); i < 0 || j < i {
		t.Errorf("trace %q: the second %s entered the core before the first left it", tr, what)
	}
}

// One person's two top-level mentions in a channel reach the core in the
// order Slack sent them (their requests are numbered in the order they were
// asked; a "cancel" then a "retry" run in that order): while the first is
// held, the second waits.
func TestOnePersonsMentionsKeepTheirOrder(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			h := pipelined(t, mode, g)
			inOrder(t, g, "mention", func() { h.deliverUnacked(h.mentionEvent(member, "coder echo gated")) }, "coder echo gated",
				func() { h.deliverUnacked(h.mentionEvent(member, "coder echo second")) }, "coder echo second")
			h.waitStore("both requests", func() bool { return len(h.requests()) == 2 })
			rs := h.requests()
			if rs[0].Ask != "echo gated" || rs[1].Ask != "echo second" {
				t.Errorf("requests in ID order ask %q, %q: want the order they were asked in", rs[0].Ask, rs[1].Ask)
			}
		})
	}
}

// Two replies in one thread reach the core one after the other, in the
// order Slack sent them, even when the first is held: the second, queued
// (left unacknowledged at the end of its budget), waits until the first has
// left the core.
func TestRepliesInOneThreadKeepTheirOrder(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			h := pipelined(t, mode, g)
			h.mention(member, "coder echo the thread")
			h.waitStore("the request", func() bool { return len(h.requests()) == 1 })
			id := h.requests()[0].ID.String()
			h.waitFake("the request's parent", func(*slacktest.Server) bool { return len(h.parents(id)) == 1 })
			parent := h.parents(id)[0].TS
			reply := func(text string) {
				ts, err := h.fake.AddUserMessage(channel, member, text, parent)
				if err != nil {
					t.Fatal(err)
				}
				h.deliverUnacked(slacktest.MessageEvent(h.eventID(), channel, member, text, ts, parent))
			}
			inOrder(t, g, "reply", func() { reply("first gated") }, "first gated", func() { reply("second") }, "second")
		})
	}
}

// A click on a card in a thread keeps its order with the thread's replies
// (a "cancel" reply, then a click on Retry): while a reply is held, the
// click waits (acknowledged when its budget runs out: Slack does not
// deliver a click again).
func TestClickInAThreadKeepsItsOrderWithReplies(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := newGate()
			h := pipelined(t, mode, g)
			h.mention(member, "coder echo the thread") // pending: its approval card goes into the thread
			h.waitStore("the request", func() bool { return len(h.requests()) == 1 })
			id := h.requests()[0].ID.String()
			var card slacktest.Message
			h.waitFake("the card in the thread", func(s *slacktest.Server) bool {
				for _, m := range s.Messages() {
					if m.Channel == channel && m.ThreadTS != "" && hasButtons(m) {
						card = m
						return true
					}
				}
				return false
			})
			reply := func() {
				ts, err := h.fake.AddUserMessage(channel, member, "held gated", card.ThreadTS)
				if err != nil {
					t.Fatal(err)
				}
				h.deliverUnacked(slacktest.MessageEvent(h.eventID(), channel, member, "held gated", ts, card.ThreadTS))
			}
			click := func() {
				h.click(slacktest.BlockActionsPayload(owner, channel, card.TS, card.ThreadTS, actionsBlockID(t, card), "approve", id))
			}
			inOrder(t, g, "event of the thread", reply, "held gated", click, "")
		})
	}
}
