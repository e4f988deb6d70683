package ratelimit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// Calls of one key run one at a time, each starting at least every after the
// previous one returned; other keys do not wait for it.
func TestSpacerSpacesFromTheEndOfTheLastCall(t *testing.T) {
	s := NewSpacer(50 * time.Millisecond)
	ctx := context.Background()
	var mu sync.Mutex
	var starts, ends []time.Time
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_ = s.Do(ctx, "chat", func() error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // plays the call's latency
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
				return nil
			})
		})
	}
	wg.Wait()
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(ends[i-1]); gap < 50*time.Millisecond {
			t.Errorf("call %d started %s after the previous ended, want at least 50ms", i, gap)
		}
	}
	begin := time.Now()
	if err := s.Do(ctx, "other", func() error { return nil }); err != nil || time.Since(begin) > 40*time.Millisecond {
		t.Errorf("another key waited %s (%v)", time.Since(begin), err)
	}
}

// A RetryAfterError holds the key for as long as the platform asked; a
// waiting caller gives up when its context ends.
func TestSpacerHonoursRetryAfter(t *testing.T) {
	s := NewSpacer(time.Millisecond)
	limited := &chat.RetryAfterError{After: time.Hour, Err: errors.New("429")}
	if err := s.Do(context.Background(), "chat", func() error { return limited }); !errors.Is(err, limited) {
		t.Fatalf("Do returned %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	ran := false
	err := s.Do(ctx, "chat", func() error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("a call during the hour's wait: ran=%v err=%v", ran, err)
	}
}
