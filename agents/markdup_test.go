package agents_test

import (
	"context"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
)

// dupRuntime applies the same marked report twice, as durably does when a
// commit's outcome is unknown (etcd ErrUnavailable after the Txn landed).
type dupRuntime struct{ said chan struct{} }

func (m *dupRuntime) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	ms := sink.(marker)
	for i := 0; i < 2; i++ {
		if err := ms.Marking(5).Message(ctx, "report"); err != nil {
			return agents.Outcome{}, err
		}
	}
	m.said <- struct{}{}
	<-ctx.Done()
	return agents.Outcome{}, ctx.Err()
}

func TestMarkedReportRepeatedIsAppliedOnce(t *testing.T) {
	e := newEnv(t)
	rt := &dupRuntime{said: make(chan struct{}, 1)}
	e.start(nil, agents.Agent{Name: "coder", Runtime: rt})
	r := e.ask(alice, "coder", "go")
	select {
	case <-rt.said:
	case <-time.After(30 * time.Second):
		t.Fatal("never the reports")
	}
	if n := len(e.replies(r.ID)); n != 1 {
		t.Fatalf("report seq 5 applied twice: %d replies posted, want 1 (the stored mark already covers it)", n)
	}
}
