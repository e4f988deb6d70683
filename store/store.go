// Package store defines the transactional state store that every core package
// writes through, and the indexes (sequences, expiry timers, outbox, dedupe
// keys) built once on top of it for every backend.
package store

import (
	"context"
	"errors"
)

// Errors returned by every Store implementation.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrStop, returned by a Scan callback, ends the scan without error.
	ErrStop = errors.New("store: stop")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
)

// Store is an ordered key-value store with serializable transactions and
// change notifications. Keys are grouped in buckets; both are plain strings.
type Store interface {
	// Update runs fn in a serializable read-write transaction: all of fn's
	// writes commit together, or none do if fn returns an error. fn may be run
	// more than once and must have no effects outside tx.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn against a consistent read-only snapshot.
	View(ctx context.Context, fn func(Tx) error) error
	// Subscribe returns a channel that receives a (coalesced) signal after each
	// committed transaction that called Notify(topic), and a func that ends the
	// subscription.
	Subscribe(topic string) (<-chan struct{}, func())
	// Close releases the store.
	Close() error
}

// Tx is one transaction. Values passed to Scan callbacks are valid only during
// the callback; Get returns a copy.
type Tx interface {
	// Get returns the value of key in bucket, or ErrNotFound.
	Get(bucket, key string) ([]byte, error)
	// Put sets key in bucket (bucket is created when needed).
	Put(bucket, key string, value []byte) error
	// Delete removes key from bucket; deleting a missing key is not an error.
	Delete(bucket, key string) error
	// Scan calls fn for every key in [from, to) of bucket in ascending byte
	// order; to == "" means no upper bound. fn returning ErrStop ends the scan.
	Scan(bucket, from, to string, fn func(key string, value []byte) error) error
	// Notify wakes subscribers of topic once this transaction commits.
	Notify(topic string)
}

// PrefixEnd returns the smallest key greater than every key with prefix p,
// for use as Scan's upper bound ("" when there is none).
func PrefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}
