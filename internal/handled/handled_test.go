package handled_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/internal/handled"
)

// core counts its calls per event and answers with the event's text.
type core struct{ calls map[string]int }

func (c *core) Handle(_ context.Context, ev chat.Event) chat.Response {
	c.calls[ev.ID]++
	return chat.Response{Text: ev.Text, Answer: true, Retry: ev.Text == "retry"}
}

func newCore() *core { return &core{calls: map[string]int{}} }

// A redelivery of an answered event gets the recorded answer without the
// core; an answer told is not told again, one whose telling failed is told
// by the next delivery; Retry and events without an ID are not recorded.
func TestRedeliveryIsAnsweredOnce(t *testing.T) {
	ctx := context.Background()
	s := handled.New(time.Hour, clock.NewFake(time.Unix(1e9, 0)))
	c := newCore()
	ev := chat.Event{ID: "Ev1", Text: "R-07 cancelled"}

	a := s.Handle(ctx, c, ev)
	if a.Repeat || !a.Tell || a.Text != "R-07 cancelled" {
		t.Fatalf("first delivery: %+v, want the core's answer to tell", a)
	}
	if again := s.Handle(ctx, c, ev); !again.Repeat || again.Tell || again.Text != "R-07 cancelled" {
		t.Errorf("redelivery while it is told: %+v, want the recorded answer, not to tell", again)
	}
	s.Told(ev.ID, false) // the send failed
	if again := s.Handle(ctx, c, ev); !again.Repeat || !again.Tell {
		t.Errorf("redelivery after a failed send: %+v, want it to tell", again)
	}
	s.Told(ev.ID, true)
	if again := s.Handle(ctx, c, ev); again.Tell {
		t.Errorf("redelivery after it was told: %+v, want it not to tell", again)
	}
	if c.calls["Ev1"] != 1 {
		t.Errorf("the core handled Ev1 %d times, want once", c.calls["Ev1"])
	}

	for range 2 {
		if a := s.Handle(ctx, c, chat.Event{ID: "Ev2", Text: "retry"}); a.Repeat || a.Tell || !a.Retry {
			t.Errorf("Retry: %+v, want it passed on, nothing to tell", a)
		}
		s.Handle(ctx, c, chat.Event{Text: "no id"})
	}
	if c.calls["Ev2"] != 2 || c.calls[""] != 2 {
		t.Errorf("the core handled a Retry %d and an event without ID %d times, want 2 each", c.calls["Ev2"], c.calls[""])
	}
}

// An answer is remembered for keep, and at most MaxEvents of them, the
// oldest forgotten first.
func TestBounds(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1e9, 0))
	s := handled.New(time.Hour, clk)
	c := newCore()
	s.Handle(ctx, c, chat.Event{ID: "old"})
	clk.Advance(time.Hour)
	s.Handle(ctx, c, chat.Event{ID: "old"}) // an hour on: still remembered
	clk.Advance(time.Millisecond)
	s.Handle(ctx, c, chat.Event{ID: "old"}) // past keep: the core again
	if c.calls["old"] != 2 {
		t.Errorf("the core handled an event %d times over keep and past it, want 2", c.calls["old"])
	}
	for i := range handled.MaxEvents {
		s.Handle(ctx, c, chat.Event{ID: fmt.Sprint(i)})
	}
	if n := s.Len(); n != handled.MaxEvents {
		t.Errorf("%d events remembered, want %d", n, handled.MaxEvents)
	}
	s.Handle(ctx, c, chat.Event{ID: "old"}) // the oldest, dropped
	s.Handle(ctx, c, chat.Event{ID: "1"})   // still there
	if c.calls["old"] != 3 || c.calls["1"] != 1 {
		t.Errorf("past the bound the oldest reached the core %d times, the second oldest %d: want 3 and 1", c.calls["old"], c.calls["1"])
	}
}
