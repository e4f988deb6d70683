package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// pruneAbove is the number of keys above which idle keys are forgotten.
const pruneAbove = 1024

// Spacer keeps calls that share a key apart: one at a time per key, and the
// next starts at least Every after the previous one returned. Spacing from
// the end of a call (not from its start, as a token bucket does) guarantees
// the gap where the platform measures it, on arrival, whatever the latency of
// each call. When a call returns a *chat.RetryAfterError the key waits that
// long before its next call, so the other effects of the same key do not run
// into the limit too.
type Spacer struct {
	every time.Duration

	mu   sync.Mutex
	keys map[string]*slot
}

type slot struct {
	lock  chan struct{} // holds one token while a call of the key runs
	next  time.Time     // earliest start of the next call; guarded by lock
	users int           // callers holding or waiting for the slot; guarded by Spacer.mu
}

// NewSpacer returns a Spacer that keeps calls of one key every apart.
func NewSpacer(every time.Duration) *Spacer {
	return &Spacer{every: every, keys: map[string]*slot{}}
}

// Do runs fn for key once the key is free and its spacing has passed, and
// returns fn's error (or ctx's, if ctx ends first).
func (s *Spacer) Do(ctx context.Context, key string, fn func() error) error {
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
	gap := s.every
	var ra *chat.RetryAfterError
	if errors.As(err, &ra) && ra.After > gap {
		gap = ra.After
	}
	sl.next = time.Now().Add(gap)
	return err
}

func (s *Spacer) acquire(key string) *slot {
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

func (s *Spacer) release(sl *slot) {
	s.mu.Lock()
	sl.users--
	s.mu.Unlock()
}

// pruneLocked forgets keys nobody uses whose spacing has passed. s.mu must be
// held; a slot with no users has no holder, so reading next is safe.
func (s *Spacer) pruneLocked() {
	now := time.Now()
	for k, sl := range s.keys {
		if sl.users == 0 && sl.next.Before(now) {
			delete(s.keys, k)
		}
	}
}
