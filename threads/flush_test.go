package threads_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/threads"
)

// TestFlush: Flush delivers what the outbox holds and returns once it is
// empty, waiting for an effect held back by a Retry-After that ends before
// its deadline; one that ends after the deadline makes it give up at once,
// saying how many effects are left; an empty outbox flushes even after the
// deadline.
func TestFlush(t *testing.T) {
	f := newFixture(t)
	d := threads.NewDeliverer(f.db, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)), f.p)
	r := f.create(t)
	f.p.failing["thread"] = &chat.RetryAfterError{After: 300 * time.Millisecond, Err: errors.New("429")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := d.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("flushed in %v, before the effect's Retry-After of 300ms", took)
	}
	if calls := f.p.Calls(); len(calls) != 1 || calls[0] != "thread "+r.ID.String() {
		t.Errorf("delivered %v, want the thread", calls)
	}
	if n := f.pending(t); n != 0 {
		t.Errorf("%d effects left after a flush", n)
	}

	f.create(t)
	f.p.failing["thread"] = &chat.RetryAfterError{After: time.Minute, Err: errors.New("429")}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start = time.Now()
	err := d.Flush(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 effect(s) left") || !strings.Contains(err.Error(), "after the deadline") {
		t.Errorf("flush with an effect due after the deadline: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("gave up after %v; want at once", took)
	}

	done, cancel := context.WithCancel(context.Background())
	cancel()
	g := newFixture(t)
	if err := threads.NewDeliverer(g.db, clock.Real{}, slog.New(slog.DiscardHandler), g.p).Flush(done); err != nil {
		t.Errorf("flushing an empty outbox after the deadline: %v", err)
	}
}
