package agents_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// lostRuntime has lost session "gone" (as a CLI whose files are gone);
// any other turn answers, after taking the session "fresh".
type lostRuntime struct {
	mu    sync.Mutex
	turns []agents.Turn
}

func (l *lostRuntime) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	l.mu.Lock()
	l.turns = append(l.turns, t)
	l.mu.Unlock()
	if t.Session == "gone" {
		return agents.Outcome{}, fmt.Errorf("%w: claude: No conversation found with session ID: gone", agents.ErrSessionLost)
	}
	if err := sink.Session(ctx, "fresh"); err != nil {
		return agents.Outcome{}, err
	}
	return agents.Outcome{Final: "continued"}, nil
}

// TestSessionLost: a turn whose session the agent no longer has continues
// in a fresh session from a recap, audited and said in the thread; the
// request does not fail.
func TestSessionLost(t *testing.T) {
	e := newEnv(t)
	r := e.ask(alice, "coder", "fix the build")
	err := e.svc.Store().Update(e.ctx, func(tx store.Tx) error {
		_, err := e.svc.UpdateTx(tx, r.ID, "test", "session", "gone", func(r *requests.Request) { r.Session = "gone" })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rt := &lostRuntime{}
	e.start(nil, agents.Agent{Name: "coder", Runtime: rt})
	got := e.waitState(r.ID, requests.Done)
	if got.Result != "continued" || got.Session != "fresh" {
		t.Fatalf("result %q session %q", got.Result, got.Session)
	}
	if !e.hasAudit(r.ID, "session_lost", "session gone: agent session lost: claude: No conversation found") {
		t.Errorf("no session_lost record:\n%s", e.auditText(r.ID))
	}
	said := false
	for _, m := range e.replies(r.ID) {
		said = said || strings.Contains(m.Text, "coder's session gone is gone") && strings.Contains(m.Text, "continues in a fresh session")
	}
	if !said {
		t.Errorf("the thread does not say so: %+v", e.replies(r.ID))
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.turns) != 2 {
		t.Fatalf("%d turns, want 2", len(rt.turns))
	}
	fresh := rt.turns[1]
	if fresh.Session != "" || !fresh.Resumed || len(fresh.Input) < 2 ||
		fresh.Input[0].Kind != agents.InputAsk || fresh.Input[0].Text != "fix the build" {
		t.Fatalf("fresh turn %+v", fresh)
	}
	recap := fresh.Input[1]
	if recap.Kind != agents.InputRecap || !strings.Contains(recap.Text, "You were interrupted") || !strings.Contains(recap.Text, "start") {
		t.Errorf("recap %+v", recap)
	}
}
