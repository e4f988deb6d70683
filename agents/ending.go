package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// How a turn's end is recorded: its usage, a yield that parks the request,
// and the terminal event with the pending input it got.

// record writes how r's turn ended (out, or the runtime's error).
func (s *Scheduler) record(ctx context.Context, log *slog.Logger, r *requests.Request, out Outcome, err error, got []pendingInput) error {
	switch {
	case err != nil:
		log.WarnContext(ctx, "turn failed", "error", err)
		return s.end(ctx, r.ID, requests.Fail, err.Error(), "", got)
	case out.Stopped:
		return s.end(ctx, r.ID, requests.Cancel, "", out.Final, got)
	case out.Yielded:
		return s.yield(ctx, r, out.Reason, got)
	case out.YieldIfWaiting:
		return s.finalOrWait(ctx, r, out.Final, got)
	default:
		return s.end(ctx, r.ID, requests.Finish, "", out.Final, got)
	}
}

// recordUsage adds what a turn cost to its request (audited: the export
// has each turn's), before the turn's end is recorded, so that the final
// status shows it.
func (s *Scheduler) recordUsage(ctx context.Context, log *slog.Logger, id requests.ID, agent string, u requests.Usage) {
	if s.OnUsage != nil {
		s.OnUsage(agent, u)
	}
	detail := fmt.Sprintf("input %d, output %d, cache read %d, cache write %d tokens; $%.4f",
		u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.CostUSD)
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		_, err := s.svc.UpdateTx(tx, id, actor, "usage", detail, func(r *requests.Request) { r.Usage = r.Usage.Add(u) })
		return err
	})
	if err != nil {
		log.WarnContext(ctx, "recording the turn's usage", "error", err)
	}
}

// yield parks a request whose agent ended its turn waiting, if it waits on
// something: what the delegator knows of (an open rendezvous or task), or
// input for it that arrived after the turn began (a task that ended, or an
// answer that came, during the very turn that started it: the next turn
// gets it at once). Otherwise the request fails. The delegator is asked
// first: whatever ends after it answered "nothing" has already put its
// result in the pending input, which the parking transaction then sees.
func (s *Scheduler) yield(ctx context.Context, r *requests.Request, reason string, got []pendingInput) error {
	waiting, err := s.waiting(ctx, r.ID)
	if err != nil {
		return s.end(ctx, r.ID, requests.Fail, "the agent yielded: "+err.Error(), "", got)
	}
	parked, err := s.park(ctx, r, waiting, reason, "", got, func(Input) bool { return true })
	switch {
	case err != nil || parked:
		return err
	case s.Delegator == nil:
		return s.end(ctx, r.ID, requests.Fail, "the agent yielded, but delegation is not available", "", got)
	default:
		return s.end(ctx, r.ID, requests.Fail, "the agent yielded, but it waits on nothing", "", got)
	}
}

// waiting asks the delegator whether request id waits on a rendezvous or
// task (false without a delegator).
func (s *Scheduler) waiting(ctx context.Context, id requests.ID) (bool, error) {
	if s.Delegator == nil {
		return false, nil
	}
	return s.Delegator.Waiting(ctx, id)
}

// park parks request r, whose turn ended waiting, if it waits on
// something: waiting (the delegator's word), or input for it that arrived
// after the turn began and that counts. text, when not empty, is posted in
// the thread (a CLI agent's final answer that is not its answer),
// in the same transaction. It reports whether it parked.
func (s *Scheduler) park(ctx context.Context, r *requests.Request, waiting bool, reason, text string, got []pendingInput, counts func(Input) bool) (bool, error) {
	acked := map[string]bool{}
	for _, it := range got {
		acked[it.key] = true
	}
	parked := false
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		parked = waiting
		if !parked {
			items, err := pendingInputTx(tx, r)
			if err != nil {
				return err
			}
			for _, it := range items {
				parked = parked || (!acked[it.key] && counts(it.in))
			}
		}
		if !parked {
			return nil
		}
		if err := tx.Put(bucketParked, requestKey(r), []byte(reason)); err != nil {
			return err
		}
		if err := forgetCallsTx(tx, r); err != nil {
			return err
		}
		for _, it := range got {
			if err := tx.Delete(bucketInput, it.key); err != nil {
				return err
			}
		}
		after, err := s.svc.UpdateTx(tx, r.ID, actor, "yield", reason, func(r *requests.Request) {
			r.Activity = "waiting"
			if reason != "" {
				r.Activity += ": " + reason
			}
		})
		if err != nil || text == "" {
			return err
		}
		return s.threads.Reply(tx, after, chat.Message{Kind: "reply", Text: s.svc.Clip(text)})
	})
	return parked, err
}

// end applies the terminal event and, in the same transaction, acknowledges
// the pending input items the turn got; items that arrived too late are
// recorded as undelivered (audit and a notice in the thread), never silently dropped. A
// cancel keeps the reason recorded when it was asked; a stop that nobody
// asked for is a failure.
func (s *Scheduler) end(ctx context.Context, id requests.ID, ev requests.Event, reason, result string, got []pendingInput) error {
	acked := map[string]bool{}
	for _, it := range got {
		acked[it.key] = true
	}
	reason, result = s.svc.Clip(reason), s.svc.Clip(result)
	return s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		ev, reason := ev, reason
		if ev == requests.Cancel && !r.CancelRequested {
			ev, reason = requests.Fail, "the agent stopped before it finished"
		}
		after, err := s.svc.ApplyTx(tx, id, requests.Change{Event: ev, Actor: actor, Detail: reason,
			Mutate: func(r *requests.Request) {
				if reason != "" {
					r.Reason = reason
				}
				r.Result = result
				r.Progress, r.Activity = 0, ""
			}})
		if errors.Is(err, requests.ErrIllegalTransition) {
			s.log.WarnContext(ctx, "request changed before its turn ended", "request_id", id.String(), "error", err)
			return nil
		}
		if err != nil {
			return err
		}
		failpoint.Hit(failpoint.TurnEnding) // the end is being recorded: not committed
		failpoint.AtCommit(tx, failpoint.RequestEnded)
		if err := tx.Delete(bucketParked, requestKey(r)); err != nil {
			return err
		}
		if err := tx.Delete(bucketTurns, requestKey(r)); err != nil {
			return err
		}
		if err := tx.Delete(bucketWoken, requestKey(r)); err != nil {
			return err
		}
		if err := forgetCallsTx(tx, r); err != nil {
			return err
		}
		items, err := pendingInputTx(tx, r)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := tx.Delete(bucketInput, it.key); err != nil {
				return err
			}
			if acked[it.key] {
				continue
			}
			what := it.in.Kind
			if it.in.From != "" {
				what += " from " + it.in.From
			}
			if err := audit.Append(tx, audit.Record{Time: after.Updated, RequestID: id.String(), Actor: actor,
				Action: "undelivered", From: after.State.String(), To: after.State.String(),
				Detail: what + " arrived after the last turn: " + clip.Line(it.in.Text, 200, clip.Bytes)}); err != nil {
				return err
			}
			if err := s.threads.Reply(tx, after, chat.Message{Kind: "notice",
				Text: fmt.Sprintf("(%s arrived after the agent's last turn and was not delivered)", what)}); err != nil {
				return err
			}
		}
		return nil
	})
}
