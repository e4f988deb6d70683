package agents

import (
	"context"
	"errors"
	"fmt"

	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/store"
)

// The scheduler's sink keeps, for a runtime that runs the turn elsewhere
// and numbers its reports (a runner: package runners), where the turn
// stands: the number of the last report applied is the turn record's Mark,
// written in the very transaction that applies the report. So whoever
// carries the turn on (this bridge after a restart, a new leader) asks
// for the reports after the mark and no durable report is lost or applied
// twice. Runtimes reach it through their own interface (runners: a type
// assertion on the Sink they are given).

// Mark is the turn's mark: the number of the last report a Marking sink
// applied (0: none yet, or the request has no turn record).
func (k *sink) Mark(ctx context.Context) (int, error) {
	var rec turnRecord
	err := k.s.svc.Store().View(ctx, func(tx store.Tx) error { return store.GetJSON(tx, bucketTurns, k.key, &rec) })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("agents: mark of %s: %w", k.id, err)
	}
	return rec.Mark, nil
}

// Marking is the sink whose durable reports (Session, Tool, Progress,
// Message) each store seq as the turn's mark in their transaction. Calls
// are not marked: the call journal makes a repeated call idempotent.
func (k *sink) Marking(seq int) Sink {
	m := *k
	m.mark = seq
	return &m
}

// errApplied: the report's number is at or below the turn's mark, so the
// report is applied already (a write whose commit's outcome was unknown,
// retried by durably, or a frame resent): the transaction is dropped and
// the report answered as done.
var errApplied = errors.New("agents: report applied already")

// applied reports whether err is markTx's errApplied: the sink's write
// committed nothing and the report counts as done.
func applied(err error) bool { return errors.Is(err, errApplied) }

// marked is markTx as a report's guard (reportOnce): done when the
// report is applied already.
func (k *sink) marked(tx store.Tx) (done bool, err error) {
	if err := k.markTx(tx); !applied(err) {
		return false, err
	}
	return true, nil
}

// markTx stores k's mark in tx (nothing for an unmarked sink, or a request
// started by an earlier version, which has no turn record). The mark only
// grows: a report at or below it is refused with errApplied, so that the
// transaction writes nothing (callers call markTx before any write).
func (k *sink) markTx(tx store.Tx) error {
	if k.mark == 0 {
		return nil
	}
	var rec turnRecord
	switch err := store.GetJSON(tx, bucketTurns, k.key, &rec); {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case rec.Mark >= k.mark:
		return errApplied
	}
	rec.Mark = k.mark
	failpoint.AtCommit(tx, failpoint.FrameApplied)
	return store.PutJSON(tx, bucketTurns, k.key, rec)
}
