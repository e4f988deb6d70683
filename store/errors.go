package store

import "errors"

// Kinds of store failure. Every backend wraps its errors so that callers
// can tell them apart with errors.Is: a transient condition is retried (the
// write is made again later), a permanent one is the outcome of that one
// operation, and a fenced write means another instance leads now.
var (
	// ErrUnavailable: the store could not be reached or did not answer in
	// time (etcd without quorum, an etcd leader election, a timeout).
	// Transient: retry later.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrFull: the store has no space left (bolt: ENOSPC; etcd: its quota
	// alarm). Transient: retry once space was freed.
	ErrFull = errors.New("store: no space left")
	// ErrTooLarge: one transaction's writes exceed what the backend can
	// commit at once. Permanent: the same transaction will never commit.
	ErrTooLarge = errors.New("store: transaction too large")
	// ErrFenced: this instance lost leadership; the write was refused.
	ErrFenced = errors.New("store: fenced: this instance is no longer the leader")
	// ErrExpanded: the effect ExpandEffect was to expand is no longer in
	// the outbox as it was (delivered, or expanded already).
	ErrExpanded = errors.New("store: effect expanded or delivered already")
)

// Transient reports whether err is a store condition that goes away by
// itself (ErrUnavailable, ErrFull): the operation should be retried, not
// turned into anyone's outcome.
func Transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrFull)
}
