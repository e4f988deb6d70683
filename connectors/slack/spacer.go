package slack

import (
	"context"
	"sync"
	"time"
)

// pruneAbove is the number of keys above which idle keys are forgotten.
const pruneAbove = 1024

// spacer keeps calls that share a key apart: one at a time per key, and the
// next starts at least every after the previous one returned. Spacing from
// the end of a call (not from its start, as a token bucket does) guarantees
// the gap where Slack measures it, on arrival, whatever the latency of each
// call. When Slack answers 429 the key waits for Retry-After before its next
// call, so the other effects of the same channel do not run into it too.
type spacer struct {
	every time.Duration

	mu   sync.Mutex
	keys map[string]*slot
}

type slot struct {
	lock  chan struct{} // holds one token while a call of the key runs
	next  time.Time     // earliest start of the next call; guarded by lock
	users int           // callers holding or waiting for the slot; guarded by spacer.mu
}

func newSpacer(every time.Duration) *spacer {
	return &spacer{every: every, keys: map[string]*slot{}}
}

// do runs fn for key once the key is free and its spacing has passed.
func (s *spacer) do(ctx context.Context, key string, fn func() error) error {
	sl := s.acquire(key)
	defer s.release(sl)
	select {
	case sl.lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-sl.lock }()
	if wait := time.Until(sl.next); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	err := fn()
	sl.next = time.Now().Add(max(s.every, retryAfter(err)))
	return err
}

func (s *spacer) acquire(key string) *slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.keys[key]
	if !ok {
		if len(s.keys) >= pruneAbove {
			s.pruneLocked()
		}
		sl = &slot{lock: make(chan struct{}, 1)}
		s.keys[key] = sl
	}
	sl.users++
	return sl
}

func (s *spacer) release(sl *slot) {
	s.mu.Lock()
	sl.users--
	s.mu.Unlock()
}

// pruneLocked forgets keys nobody uses whose spacing has passed. s.mu must be
// held; a slot with no users has no holder, so reading next is safe.
func (s *spacer) pruneLocked() {
	now := time.Now()
	for k, sl := range s.keys {
		if sl.users == 0 && sl.next.Before(now) {
			delete(s.keys, k)
		}
	}
}
