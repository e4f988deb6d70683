package agents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// durably runs write until it is not stopped by a transient store error
// (store.Transient: etcd unavailable, disk full), waiting between attempts
// (minRetry doubling to maxRetry) until ctx ends. What a turn reports, and
// how it ended, is retried this way rather than turned into the request's
// outcome.
func (s *Scheduler) durably(ctx context.Context, write func() error) error {
	wait := time.Duration(0)
	for {
		err := write()
		if err == nil || !store.Transient(err) {
			return err
		}
		wait = min(max(2*wait, minRetry), maxRetry)
		s.log.WarnContext(ctx, "store unavailable; retrying the write", "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// settle records how a turn ended (record, given a context that shutdown
// does not cancel: the outcome is recorded even if shutdown began after it
// arrived). A transient store error is retried until stop ends (then the
// next start resumes the turn); the turn is never run again because its end
// could not be written. A permanent error (store.ErrTooLarge, or any error
// that is not transient: the same transaction will never commit) fails the
// request with the reason, so the agent's queue moves on. A fenced write is
// returned: another instance leads and resumes the request.
func (s *Scheduler) settle(stop context.Context, id requests.ID, got []pendingInput, record func(context.Context) error) error {
	ctx := context.WithoutCancel(stop)
	err := s.durably(stop, func() error { return record(ctx) })
	if err == nil || store.Transient(err) || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrClosed) {
		return err
	}
	s.log.ErrorContext(ctx, "the end of the turn cannot be stored; failing the request", "request_id", id.String(), "error", err)
	reason := "the outcome of the turn could not be stored: " + err.Error()
	if err := s.durably(stop, func() error { return s.end(ctx, id, requests.Fail, reason, "", got) }); err != nil {
		return fmt.Errorf("agents: end of %s: %w", id, err)
	}
	return nil
}

// sink records what the agent reports, through the store.
type sink struct {
	s      *Scheduler
	id     requests.ID
	r      *requests.Request // as the turn began: where its thread is (Live)
	cancel <-chan struct{}   // the turn's cancel
	// key, turn and resumed make the calls' idempotency keys: the
	// request's store key, the turn's number, and whether it repeats a cut
	// turn.
	key     string
	turn    int
	resumed bool
	// mark, when not 0, is stored as the turn's mark with each durable
	// report (Marking).
	mark int
}

func (k *sink) update(ctx context.Context, action, detail string, fn func(*requests.Request)) error {
	err := k.s.durably(ctx, func() error {
		return k.s.svc.Store().Update(ctx, func(tx store.Tx) error {
			if err := k.markTx(tx); err != nil {
				return err
			}
			_, err := k.s.svc.UpdateTx(tx, k.id, "agent", action, detail, fn)
			return err
		})
	})
	if applied(err) {
		return nil
	}
	return err
}

func (k *sink) Session(ctx context.Context, id string) error {
	return k.update(ctx, "session", id, func(r *requests.Request) { r.Session = id })
}

func (k *sink) Tool(ctx context.Context, phase, name string) error {
	if k.s.Live != nil {
		k.s.Live.Tool(k.r, phase, name)
	}
	return k.update(ctx, "", "", func(r *requests.Request) {
		if phase == PhaseStart {
			r.Activity = name
		} else {
			r.Activity = ""
		}
	})
}

// Progress records a progress report through the same code as the MCP
// tool report_progress (Scheduler.Call); for an exec agent a refused report
// is a protocol error that fails the turn.
func (k *sink) Progress(ctx context.Context, percent int, text string) error {
	refusal, err := k.s.progress(ctx, k.id, percent, text, &reportOnce{guard: k.marked})
	if err == nil && refusal != "" {
		err = fmt.Errorf("%w: %s", ErrProtocol, refusal)
	}
	return err
}

// Message posts text in the request's thread, cut to the request bound.
func (k *sink) Message(ctx context.Context, text string) error {
	text = k.s.svc.Clip(text)
	err := k.s.durably(ctx, func() error {
		return k.s.svc.Store().Update(ctx, func(tx store.Tx) error {
			r, err := k.s.svc.GetTx(tx, k.id)
			if err != nil {
				return err
			}
			if err := k.markTx(tx); err != nil {
				return err
			}
			return k.s.threads.Reply(tx, r, chat.Message{Kind: "reply", Text: text})
		})
	})
	if applied(err) {
		return nil
	}
	if err == nil && k.s.Live != nil {
		k.s.Live.Said(k.r)
	}
	return err
}

// Delta implements LiveSink: in memory only (Scheduler.Live), never a
// store write.
func (k *sink) Delta(_ context.Context, text string) {
	if k.s.Live != nil {
		k.s.Live.Delta(k.r, text)
	}
}

// Thinking implements LiveSink, like Delta.
func (k *sink) Thinking(_ context.Context, text string) {
	if k.s.Live != nil {
		k.s.Live.Thinking(k.r, text)
	}
}

// Call serves an agent's call through Scheduler.Call, with the call's
// idempotency key (CallKey: the request, the turn's number, the call's id).
// If the request's cancel was asked meanwhile, the answer waits until the
// turn knows of the cancel, so that the agent hears of the cancel first.
func (k *sink) Call(ctx context.Context, ev TurnEvent) Response {
	resp := k.s.call(ctx, k.id, ev, newCallKey(k.key, k.turn, k.resumed, ev))
	if r, err := k.s.svc.Get(ctx, k.id); err == nil && r.CancelRequested {
		select {
		case <-k.cancel:
		case <-ctx.Done():
		}
	}
	return resp
}
