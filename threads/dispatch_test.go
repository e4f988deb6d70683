package threads_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// gatedPlatform is a platform whose thread post for one request hangs
// until released, like a platform call held by a rate limit or a slow
// network.
type gatedPlatform struct {
	*platform
	gated   string
	entered chan struct{}
	release chan struct{}
	left    atomic.Bool // the held call has returned
}

func (g *gatedPlatform) StartThread(ctx context.Context, ch string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	if m.Request == g.gated {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			time.Sleep(20 * time.Millisecond) // a platform call that takes a while to give up
			g.left.Store(true)
			return chat.ThreadRef{}, chat.MessageRef{}, ctx.Err()
		}
	}
	return g.platform.StartThread(ctx, ch, m)
}

// runHeld makes a request whose thread post hangs until released, and
// runs a Deliverer until cancel; done is closed when Run has returned. It
// returns once the post has begun.
func runHeld(t *testing.T, f *fixture) (*requests.Request, *gatedPlatform, context.CancelFunc, chan struct{}) {
	t.Helper()
	slow := f.create(t)
	g := &gatedPlatform{platform: f.p, gated: slow.ID.String(), entered: make(chan struct{}), release: make(chan struct{})}
	d := threads.NewDeliverer(f.db, f.clk, slog.New(slog.NewTextHandler(io.Discard, nil)), g)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	<-g.entered
	return slow, g, cancel, done
}

// A thread whose delivery is slow holds only itself: the threads behind
// it in the outbox go out meanwhile (in a round that waited for every
// thread, one slow thread held them all, and the outbox grew behind it),
// and Run returns only once that delivery has stopped.
func TestSlowThreadHoldsOnlyItself(t *testing.T) {
	f := newFixture(t)
	slow, g, cancel, done := runHeld(t, f)

	var later []string
	for range 3 {
		later = append(later, "thread "+f.create(t).ID.String())
	}
	waitFor(t, "the later threads posted while the first is held", func() bool {
		calls := f.p.Calls()
		for _, c := range later {
			if !slices.Contains(calls, c) {
				return false
			}
		}
		return true
	})
	if slices.Contains(f.p.Calls(), "thread "+slow.ID.String()) {
		t.Fatalf("the held thread was posted before its release: %v", f.p.Calls())
	}

	close(g.release)
	waitFor(t, "the held thread posted once released", func() bool {
		return slices.Contains(f.p.Calls(), "thread "+slow.ID.String())
	})
	waitFor(t, "the outbox empty", func() bool { return f.pending(t) == 0 })
	cancel()
	<-done
	if n := len(f.p.Calls()); n != 4 {
		t.Errorf("%d posts, want 4 (one a thread): %v", n, f.p.Calls())
	}
}

// Run waits for the delivery in flight when its term ends: a new term
// (another Run, a Flush) never delivers beside it.
func TestRunWaitsForItsDeliveries(t *testing.T) {
	f := newFixture(t)
	_, g, cancel, done := runHeld(t, f)
	cancel()
	<-done
	if !g.left.Load() {
		t.Error("Run returned while a delivery of its term was still in flight")
	}
	if n := f.pending(t); n != 1 {
		t.Errorf("%d effects pending after the term, want the held one", n)
	}
}
