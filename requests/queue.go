package requests

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/roombridge/roombridge/store"
)

// ErrQueueFull: the agent has as many requests queued as its queue may hold;
// the creation is refused (nothing is written) until the queue shrinks.
var ErrQueueFull = errors.New("queue full")

// SetQueueLimit bounds how many requests one agent may have queued (config
// requests.queue_limit); 0 or less: no bound. Set it before serving.
func (s *Service) SetQueueLimit(n int) { s.maxQueue = n }

// bucketQueueLen holds, per owner/agent, how many entries the agent's queue
// index (bucketQueue) has, as an 8-byte big-endian count: the queue limit is
// checked with one read instead of a scan of up to the limit of index keys.
// A missing count means "not counted yet" (a store written before the count
// existed, or never checked with a limit): the first check counts the index
// and stores the count, and write keeps a stored count in step from then on.
const bucketQueueLen = "agent_queue_len"

// checkQueue refuses a creation for agent when its queue is full.
func (s *Service) checkQueue(tx store.Tx, agent string) error {
	if s.maxQueue <= 0 {
		return nil
	}
	n, ok, err := queueLen(tx, s.owner, agent)
	if err == nil && !ok {
		n, err = s.countQueue(tx, agent)
	}
	if err != nil {
		return fmt.Errorf("requests: create: %w", err)
	}
	if n >= s.maxQueue {
		return fmt.Errorf("requests: create: %w: %s has %d requests waiting (the limit, requests.queue_limit); ask again once it has worked through some",
			ErrQueueFull, agent, n)
	}
	return nil
}

// countQueue counts agent's queue index in full and stores the count.
func (s *Service) countQueue(tx store.Tx, agent string) (int, error) {
	n := 0
	p := s.owner + "/" + agent + "/"
	if err := tx.Scan(bucketQueue, p, store.PrefixEnd(p), func(string, []byte) error { n++; return nil }); err != nil {
		return 0, err
	}
	return n, putQueueLen(tx, s.owner, agent, n)
}

// queueLen returns the stored count of agent's queue; ok is false if there
// is none.
func queueLen(tx store.Tx, owner, agent string) (n int, ok bool, err error) {
	b, err := tx.Get(bucketQueueLen, owner+"/"+agent)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case len(b) != 8:
		return 0, false, fmt.Errorf("store: queue count of %s: corrupt value", agent)
	}
	return int(binary.BigEndian.Uint64(b)), true, nil
}

func putQueueLen(tx store.Tx, owner, agent string, n int) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(max(n, 0)))
	return tx.Put(bucketQueueLen, owner+"/"+agent, b[:])
}

// countQueued keeps the stored queue counts in step with a write of r
// (before: its stored version, nil for a new request): the index entry of
// an approved request is in its agent's queue.
func (s *Service) countQueued(tx store.Tx, before, r *Request) error {
	type move struct {
		agent string
		delta int
	}
	var moves []move
	wasIn := before != nil && before.State == Approved
	isIn := r.State == Approved
	sameAgent := before != nil && before.Agent == r.Agent
	if wasIn && (!isIn || !sameAgent) {
		moves = append(moves, move{before.Agent, -1})
	}
	if isIn && (!wasIn || !sameAgent) {
		moves = append(moves, move{r.Agent, +1})
	}
	for _, m := range moves {
		n, ok, err := queueLen(tx, s.owner, m.agent)
		if err != nil || !ok {
			return err // not counted yet: the first check counts
		}
		if err := putQueueLen(tx, s.owner, m.agent, n+m.delta); err != nil {
			return err
		}
	}
	return nil
}

// ResetQueueCounts forgets the stored queue counts, so that each agent's
// first creation counts its queue index afresh. The leader calls it at the
// start of each term: a count is kept in step only by binaries that know
// it, so one written before an older binary led (a rolling upgrade, a
// rollback) would otherwise refuse creations, or let the queue overrun,
// from then on.
func (s *Service) ResetQueueCounts(ctx context.Context) error {
	for {
		n := 0
		err := s.store.Update(ctx, func(tx store.Tx) error {
			var keys []string
			p := s.owner + "/"
			if err := tx.Scan(bucketQueueLen, p, store.PrefixEnd(p), func(k string, _ []byte) error {
				if keys = append(keys, k); len(keys) == resetChunk {
					return store.ErrStop
				}
				return nil
			}); err != nil {
				return err
			}
			for _, k := range keys {
				if err := tx.Delete(bucketQueueLen, k); err != nil {
					return err
				}
			}
			n = len(keys)
			return nil
		})
		if err != nil {
			return fmt.Errorf("requests: reset queue counts: %w", err)
		}
		if n < resetChunk {
			return nil
		}
	}
}

// resetChunk is how many counts one transaction of ResetQueueCounts
// deletes (within etcd's 127 operations of a Txn).
const resetChunk = 64
