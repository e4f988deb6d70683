package agents_test

import (
	"context"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// heldRuntime runs each turn until told to end it: it says it runs on
// running, and answers "done" when end is closed.
type heldRuntime struct {
	running chan struct{}
	end     chan struct{}
}

func (h *heldRuntime) Run(ctx context.Context, _ agents.Turn, _ agents.Sink) (agents.Outcome, error) {
	h.running <- struct{}{}
	select {
	case <-h.end:
		return agents.Outcome{Final: "done"}, nil
	case <-ctx.Done():
		return agents.Outcome{}, ctx.Err()
	}
}

// lateOpen is the real approvals service whose Open, once the ask is
// open, holds the call until release is closed: the turn can end in
// between, before the call journals its ask. It says when the call waits
// on the ask (after the journal was written, or not) on waiting.
type lateOpen struct {
	*approvals.Service
	opened, release, waiting chan struct{}
}

func (l *lateOpen) Open(ctx context.Context, ask approvals.ActionAsk) (*approvals.Approval, error) {
	a, err := l.Service.Open(ctx, ask)
	close(l.opened)
	<-l.release
	return a, err
}

func (l *lateOpen) Wait(ctx context.Context, id string) (approvals.Decision, error) {
	close(l.waiting)
	return l.Service.Wait(ctx, id)
}

// callJournal returns the keys of the call journal (bucket agent_calls).
func (e *env) callJournal() []string {
	e.t.Helper()
	var keys []string
	err := e.db.View(e.ctx, func(tx store.Tx) error {
		return tx.Scan("agent_calls", "", "", func(k string, _ []byte) error {
			keys = append(keys, k)
			return nil
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return keys
}

// TestLateApprovalCallNotJournaled: a request_approval sent over MCP with
// a key whose ask opens as the turn runs, but whose journal entry would
// be written after the turn ended (the request is done), leaves nothing
// in the call journal: no later turn repeats it, and nobody else would
// delete it.
func TestLateApprovalCallNotJournaled(t *testing.T) {
	e := newEnv(t)
	rt := &heldRuntime{running: make(chan struct{}, 1), end: make(chan struct{})}
	appr := &lateOpen{Service: e.appr, opened: make(chan struct{}), release: make(chan struct{}), waiting: make(chan struct{})}
	var sched *agents.Scheduler
	e.start(func(s *agents.Scheduler) { s.Approver, sched = appr, s }, agents.Agent{Name: "coder", Runtime: rt})
	r := e.ask(alice, "coder", "deploy it")
	waitChan(t, rt.running, "the turn to run")

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	answered := make(chan agents.Response, 1)
	go func() {
		answered <- sched.Call(ctx, r.ID, agents.TurnEvent{Type: agents.EventRequestApproval, ID: "mcp-key-1", Action: "deploy"})
	}()
	waitChan(t, appr.opened, "the ask to open")
	close(rt.end)
	e.waitState(r.ID, requests.Done)
	close(appr.release)
	select {
	case <-appr.waiting:
	case resp := <-answered:
		t.Logf("the call was answered without waiting: %+v", resp)
	case <-time.After(30 * time.Second):
		t.Fatal("the call neither waits on its ask nor was answered within 30s")
	}
	if keys := e.callJournal(); len(keys) != 0 {
		t.Fatalf("the call journal keeps %d entries of an ended request: %q", len(keys), keys)
	}
	cancel()
	<-answered
}

// waitChan waits for a value on ch, for up to 30 s.
func waitChan[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no sign of %s within 30s", what)
	}
}
