package agents

import (
	"context"
	"errors"
)

// How a turn ended, as Scheduler.OnTurn is told.
const (
	TurnFinal       = "final"       // an answer (or, for CLI agents, an answer while waiting)
	TurnYielded     = "yielded"     // ended waiting on a delegation or task
	TurnFailed      = "failed"      // the runtime failed
	TurnStopped     = "stopped"     // stopped at a safe point after a cancel
	TurnInterrupted = "interrupted" // cut by a shutdown or drain; resumed later
)

// turnOutcome names how a turn ended, by the rules Scheduler.run acts on.
func turnOutcome(ctx context.Context, out Outcome, err error) string {
	switch {
	case errors.Is(err, ErrInterrupted) || (ctx.Err() != nil && (err != nil || out.Stopped)):
		return TurnInterrupted
	case err != nil:
		return TurnFailed
	case out.Stopped:
		return TurnStopped
	case out.Yielded:
		return TurnYielded
	}
	return TurnFinal
}
