package ratelimit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// pruneAbove is the number of keys above which idle keys are forgotten.
const pruneAbove = 1024

// aheadRun is how many DoAhead calls in a row go before a waiting Do call:
// answers get two of every three turns of a busy channel, new threads the
// third.
const aheadRun = 2

// Spacer keeps calls that share a key apart: one at a time per key, and the
// next starts at least every after the previous one returned (NewSpacer),
// or every after it started and at least floor after it returned
// (NewStartSpacer). Spacing from the end guarantees the gap on arrival
// whatever the latency of each call, at the cost of one latency per call.
// Spacing from the start (a token bucket of one token) is the pace of a
// platform that counts the calls it sees, such as Slack's one post per
// channel per second: a burst of n calls takes (n-1)·every plus one latency,
// not n·(every+latency). What the platform sees: a call is due every after
// the previous one was due and floor after the previous one returned,
// which is after the platform saw it, so whatever each call's way to the
// platform takes, any k+1 calls in a row arrive at least
// (k-1)·every+floor apart: never two closer than floor, never more than
// one call ahead of one per every (a token bucket of two tokens refilled
// every, or a window of w that takes n calls when
// (n-1)·every+floor >= w, never overflows). A call that ends in an error
// is spaced every from its end instead (it may reach the platform after
// it gave up). When a call returns a
// *chat.RetryAfterError the key waits that long after it returned before
// its next call, so the other effects of the same key do not run into the
// limit too.
//
// Calls waiting for a key are served in the order they came, except that
// a call made with DoAhead goes before the calls waiting with Do: an
// answer in an existing thread is not kept behind every other thread's new
// parent in the same channel. Not before all of them for ever: after
// aheadRun DoAhead calls in a row while a Do call waits, the oldest Do
// call goes next, so answers streaming into a channel never hold its new
// threads back for good.
type Spacer struct {
	every     time.Duration
	fromStart bool
	floor     time.Duration // from the start: the least gap after a call returned

	mu   sync.Mutex
	keys map[string]*slot
}

type slot struct {
	// Guarded by Spacer.mu:
	busy    bool      // a caller holds the slot
	waiters []*waiter // callers waiting for it, DoAhead ones first (none while not busy)
	aheads  int       // DoAhead callers handed the slot in a row while a Do caller waited

	next time.Time // earliest start of the next call; guarded by holding the slot
}

// waiter is a caller waiting for a slot: ready is closed when the slot is
// handed to it.
type waiter struct {
	ahead bool
	ready chan struct{}
}

// NewSpacer returns a Spacer that keeps calls of one key every apart.
func NewSpacer(every time.Duration) *Spacer {
	return &Spacer{every: every, keys: map[string]*slot{}}
}

// NewStartSpacer returns a Spacer that starts the calls of one key every
// apart, each at least floor after the previous one returned.
func NewStartSpacer(every, floor time.Duration) *Spacer {
	return &Spacer{every: every, fromStart: true, floor: floor, keys: map[string]*slot{}}
}

// Do runs fn for key once the key is free and its spacing has passed, and
// returns fn's error (or ctx's, if ctx ends first).
func (s *Spacer) Do(ctx context.Context, key string, fn func() error) error {
	return s.do(ctx, key, false, fn)
}

// DoAhead is Do, served before the calls waiting with Do (after those
// waiting with DoAhead): the key's spacing holds for it as for any call.
func (s *Spacer) DoAhead(ctx context.Context, key string, fn func() error) error {
	return s.do(ctx, key, true, fn)
}

func (s *Spacer) do(ctx context.Context, key string, ahead bool, fn func() error) error {
	sl, err := s.acquire(ctx, key, ahead)
	if err != nil {
		return err
	}
	defer s.release(sl)
	at := time.Now() // when this call is due: now, or the slot's next start
	if wait := sl.next.Sub(at); wait > 0 {
		at = sl.next
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	err = fn()
	end := time.Now()
	sl.next = end.Add(s.every)
	if s.fromStart && err == nil {
		// From when the call was due, not when its timer fired: a late
		// wake-up does not slow the pace (the floor bounds the catch-up).
		// Only after an answer: a call that failed may have ended before
		// the platform saw it (its context ended, the connection broke)
		// and is spaced from its end, as with NewSpacer.
		sl.next = at.Add(s.every)
		if f := end.Add(s.floor); f.After(sl.next) {
			sl.next = f
		}
	}
	var ra *chat.RetryAfterError
	if errors.As(err, &ra) && end.Add(ra.After).After(sl.next) {
		sl.next = end.Add(ra.After)
	}
	return err
}

// Share makes calls of other spaced with those of key from now on (one
// target under two names: a chat reached by a user's ID and by its own),
// when other has had no call the Spacer remembers; it reports whether it
// did. Called from within a call of key (fn), the calls of other wait for
// it and are spaced from it.
func (s *Spacer) Share(key, other string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.keys[key]
	if sl == nil || s.keys[other] != nil {
		return sl != nil && s.keys[other] == sl
	}
	s.keys[other] = sl
	return true
}

// acquire waits until the slot of key is handed to this caller (or ctx
// ends: an error, and nothing held).
func (s *Spacer) acquire(ctx context.Context, key string, ahead bool) (*slot, error) {
	s.mu.Lock()
	sl, ok := s.keys[key]
	if !ok {
		if len(s.keys) >= pruneAbove {
			s.pruneLocked()
		}
		sl = &slot{}
		s.keys[key] = sl
	}
	if !sl.busy {
		sl.busy = true
		s.mu.Unlock()
		return sl, nil
	}
	w := &waiter{ahead: ahead, ready: make(chan struct{})}
	i := len(sl.waiters)
	if ahead {
		i = 0
		for i < len(sl.waiters) && sl.waiters[i].ahead {
			i++
		}
	}
	sl.waiters = slices.Insert(sl.waiters, i, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return sl, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if j := slices.Index(sl.waiters, w); j >= 0 {
		sl.waiters = slices.Delete(sl.waiters, j, j+1)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
	s.mu.Unlock()
	// Handed over as ctx ended: pass it on.
	s.release(sl)
	return nil, ctx.Err()
}

// release hands the slot to its first waiter (the oldest Do caller after
// aheadRun DoAhead ones in a row while it waited), or frees it.
func (s *Spacer) release(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(sl.waiters) == 0 {
		sl.busy, sl.aheads = false, 0
		return
	}
	i := 0
	if j := slices.IndexFunc(sl.waiters, func(w *waiter) bool { return !w.ahead }); j > 0 && sl.aheads >= aheadRun {
		i = j // the oldest Do caller, after aheadRun DoAhead ones in a row
	}
	w := sl.waiters[i]
	sl.waiters = slices.Delete(sl.waiters, i, i+1)
	if w.ahead && slices.ContainsFunc(sl.waiters, func(w *waiter) bool { return !w.ahead }) {
		sl.aheads++
	} else {
		sl.aheads = 0
	}
	close(w.ready)
}

// pruneLocked forgets keys nobody uses whose spacing has passed. s.mu must be
// held; a slot that is not busy has no holder nor waiter, so reading next is
// safe.
func (s *Spacer) pruneLocked() {
	now := time.Now()
	for k, sl := range s.keys {
		if !sl.busy && sl.next.Before(now) {
			delete(s.keys, k)
		}
	}
}
