package agents_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/requests"
)

// numbering is the demo agent's runtime, recording the number of each turn
// it is given.
type numbering struct {
	agents.Runtime
	mu      sync.Mutex
	numbers []int
}

func (n *numbering) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	n.mu.Lock()
	n.numbers = append(n.numbers, t.Number)
	n.mu.Unlock()
	return n.Runtime.Run(ctx, t, sink)
}

// TestWakeNumbersTheNextTurn: the turn a delegated answer wakes is the
// request's next (2 after the first): calls are journaled by turn, and a
// runner re-attaches only to a turn of the same number, so a woken turn
// numbered as the one before it could get that turn's answers.
func TestWakeNumbersTheNextTurn(t *testing.T) {
	e := newEnv(t)
	coder := &numbering{Runtime: e.exec()}
	e.start(func(s *agents.Scheduler) { s.Delegator = &delegator{e: e} },
		agents.Agent{Name: "coder", Runtime: coder}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	r := e.ask(alice, "coder", "ask reviewer echo looks good")
	done := e.waitState(r.ID, requests.Done)
	if !e.hasAudit(r.ID, "wake", "1 new input") {
		t.Fatalf("the request was not woken (result %q):\n%s", done.Result, e.auditText(r.ID))
	}
	coder.mu.Lock()
	defer coder.mu.Unlock()
	if !slices.Equal(coder.numbers, []int{1, 2}) {
		t.Errorf("coder's turns were numbered %v, want [1 2]", coder.numbers)
	}
}
