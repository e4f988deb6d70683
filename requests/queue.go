package requests

import (
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

// checkQueue refuses a creation for agent when its queue is full. It counts
// the agent's index entries, at most the limit of them.
func (s *Service) checkQueue(tx store.Tx, agent string) error {
	if s.maxQueue <= 0 {
		return nil
	}
	n := 0
	p := s.owner + "/" + agent + "/"
	err := tx.Scan(bucketQueue, p, store.PrefixEnd(p), func(string, []byte) error {
		if n++; n >= s.maxQueue {
			return store.ErrStop
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("requests: create: %w", err)
	}
	if n >= s.maxQueue {
		return fmt.Errorf("requests: create: %w: %s has %d requests waiting (the limit, requests.queue_limit); ask again once it has worked through some",
			ErrQueueFull, agent, n)
	}
	return nil
}
