package agents_test

import (
	"context"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/requests"
)

// marker is the scheduler's sink as a runtime that numbers its reports
// uses it (runners'): the turn's stored mark, and a sink storing one.
type marker interface {
	Mark(ctx context.Context) (int, error)
	Marking(seq int) agents.Sink
}

// markRuntime reports what mark each turn finds; a first run (not
// resumed) reports messages marked 3 then 2 and waits to be cut.
type markRuntime struct {
	marks chan int
	said  chan struct{}
}

func (m *markRuntime) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	ms := sink.(marker)
	n, err := ms.Mark(ctx)
	if err != nil {
		return agents.Outcome{}, err
	}
	m.marks <- n
	if t.Resumed {
		return agents.Outcome{Final: "resumed"}, nil
	}
	for _, seq := range []int{3, 2} {
		if err := ms.Marking(seq).Message(ctx, "report"); err != nil {
			return agents.Outcome{}, err
		}
	}
	select {
	case m.said <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return agents.Outcome{}, ctx.Err()
}

// TestSinkMark: a report through Marking(seq) stores seq with it; one at
// or below the mark is applied already and writes nothing (the mark only
// grows); the turn resumed after a restart finds it, a new request's turn
// starts at 0.
func TestSinkMark(t *testing.T) {
	e := newEnv(t)
	rt := &markRuntime{marks: make(chan int, 4), said: make(chan struct{}, 1)}
	next := func(what string) int {
		t.Helper()
		select {
		case n := <-rt.marks:
			return n
		case <-time.After(30 * time.Second):
			t.Fatalf("never %s", what)
			return 0
		}
	}
	e.start(nil, agents.Agent{Name: "coder", Runtime: rt})
	r := e.ask(alice, "coder", "go")
	if n := next("a first turn"); n != 0 {
		t.Fatalf("a first turn finds mark %d, want 0", n)
	}
	select {
	case <-rt.said:
	case <-time.After(30 * time.Second):
		t.Fatal("never the reports")
	}
	if n := len(e.replies(r.ID)); n != 1 {
		t.Fatalf("%d reports posted, want 1 (the report marked 2 comes after the mark 3: applied already)", n)
	}
	e.stopScheduler()
	e.start(nil, agents.Agent{Name: "coder", Runtime: rt})
	if n := next("the resumed turn"); n != 3 {
		t.Fatalf("the resumed turn finds mark %d, want 3 (stored with the report; a lower one does not lower it)", n)
	}
	e.waitState(r.ID, requests.Done)
	e.ask(alice, "coder", "again")
	if n := next("another request's turn"); n != 0 {
		t.Fatalf("another request's turn finds mark %d, want 0", n)
	}
}
