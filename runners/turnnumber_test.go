package runners_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/runners"
)

// counting is an agent that answers "run N", N counting its runs.
type counting struct{ runs atomic.Int32 }

func (a *counting) Run(context.Context, agents.Turn, agents.Sink) (agents.Outcome, error) {
	return agents.Outcome{Final: fmt.Sprintf("run %d", a.runs.Add(1))}, nil
}

// TestRunnerTurnNumber: the runner keeps a turn's end until the bridge
// says it is recorded (Settled), and re-attaches only to a turn of the
// same number. Turn 1's end is never acknowledged (as if its ack were
// lost); turn 2 of the same request, resumed (a leader sent it and died
// before the runner got it), starts on the runner rather than taking turn
// 1's kept end; turn 2 sent again (its end arrived, not recorded: a
// crash) gets its end again without running; an ack of turn 1 does not
// make the runner forget turn 2; turn 2's does. The bridge's side is
// called as the scheduler calls it (Run, then Settled once the end is
// recorded), on a whole bridge (core/coretest) and a real Runner.
func TestRunnerTurnNumber(t *testing.T) {
	b := startBridge(t)
	tok := addRunner(t, b.DB, "laptop")
	ctx := context.Background()
	a := &counting{}
	r, _, _ := goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok,
		Agents: map[string]agents.Runtime{"coder": a}, Retry: 20 * time.Millisecond})
	waitConnected(t, b, "laptop")
	rt := b.Runners().Runtime("coder")
	run := func(turn agents.Turn, want string) {
		t.Helper()
		out, err := rt.Run(ctx, turn, nopSink{})
		if err != nil || out.Final != want {
			t.Fatalf("turn %d (resumed %v): %q, %v; want %q", turn.Number, turn.Resumed, out.Final, err, want)
		}
	}
	turn1 := agents.Turn{RequestID: "R-1", Agent: "coder", Number: 1}
	turn2 := agents.Turn{RequestID: "R-1", Agent: "coder", Number: 2, Resumed: true}

	run(turn1, "run 1")
	if n := r.Buffered(); n != 1 {
		t.Fatalf("the runner keeps %d frames of the ended turn, want its end (1) until it is recorded", n)
	}
	run(turn2, "run 2") // started: not turn 1's end
	run(turn2, "run 2") // re-attached: its end again, not run again
	rt.Settled(ctx, turn1)
	run(turn2, "run 2") // still kept: turn 1's ack is not turn 2's
	if n := a.runs.Load(); n != 2 {
		t.Fatalf("the agent ran %d times, want 2 (turns 1 and 2, each once)", n)
	}
	rt.Settled(ctx, turn2)
	waitFor(t, "the runner forgetting turn 2 once its end is recorded", func() bool { return r.Buffered() == 0 })
}
