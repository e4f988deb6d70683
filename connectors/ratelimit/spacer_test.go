package ratelimit

import (
	"context"
	"errors"
	"slices"
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

// A start spacer starts the calls of one key every apart (one at a time, a
// token bucket: never ahead of that pace): the call's latency is not added
// to the gap, but a call starts at least floor after the previous one
// returned.
func TestStartSpacerSpacesFromTheStartOfTheLastCall(t *testing.T) {
	const every, floor = 40 * time.Millisecond, 35 * time.Millisecond
	s := NewStartSpacer(every, floor)
	ctx := context.Background()
	var mu sync.Mutex
	var starts, ends []time.Time
	running := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_ = s.Do(ctx, "chat", func() error {
				mu.Lock()
				running++
				if running > 1 {
					t.Error("two calls of one key at once")
				}
				starts = append(starts, time.Now())
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // plays the call's latency
				mu.Lock()
				running--
				ends = append(ends, time.Now())
				mu.Unlock()
				return nil
			})
		})
	}
	wg.Wait()
	for i := 1; i < len(starts); i++ {
		if since := starts[i].Sub(starts[0]); since < time.Duration(i)*every {
			t.Errorf("call %d started %s after the first, want at least %d×%s", i, since, i, every)
		}
		if gap := starts[i].Sub(ends[i-1]); gap < floor {
			t.Errorf("call %d started %s after the previous returned, want at least %s", i, gap, floor)
		}
	}
}

// A RetryAfterError holds a start spacer's key for as long as the platform
// asked, counted from the answer.
func TestStartSpacerHonoursRetryAfter(t *testing.T) {
	s := NewStartSpacer(time.Millisecond, time.Millisecond)
	limited := &chat.RetryAfterError{After: time.Hour, Err: errors.New("429")}
	_ = s.Do(context.Background(), "chat", func() error { return limited })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	ran := false
	if err := s.Do(ctx, "chat", func() error { ran = true; return nil }); !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("a call during the hour's wait: ran=%v err=%v", ran, err)
	}
}

// What the platform sees of a start spacer: each call's way to the
// platform (up) and back differs, and a call slowed on its way is followed
// by a fast one (the case where spacing from the start alone puts two
// arrivals close together). Whatever the ways, the arrivals fit a token
// bucket of two tokens refilled every (GCRA with a burst of 2: any k+1 in
// a row at least (k-1)·every apart) and no two are closer than floor.
func TestStartSpacerArrivalsFitABurstOfTwo(t *testing.T) {
	const every = 20 * time.Millisecond
	floor := every * 2 / 3
	s := NewStartSpacer(every, floor)
	ups := []time.Duration{0, 15, 0, 18, 1, 0, 12, 0, 19, 0, 3, 16, 0}
	var arrivals []time.Time
	for _, up := range ups {
		_ = s.Do(context.Background(), "chat", func() error {
			time.Sleep(up * time.Millisecond) // plays the way to the platform
			arrivals = append(arrivals, time.Now())
			time.Sleep(time.Millisecond) // and back
			return nil
		})
	}
	for k := 1; k < len(arrivals); k++ {
		if gap := arrivals[k].Sub(arrivals[k-1]); gap < floor {
			t.Errorf("arrival %d %s after the previous, want at least %s", k, gap, floor)
		}
		for j := range k {
			if span, least := arrivals[k].Sub(arrivals[j]), time.Duration(k-j-1)*every; span < least {
				t.Errorf("arrivals %d..%d within %s, want at least %s (more than a burst of 2)", j, k, span, least)
			}
		}
	}
}

// A call of a start spacer that fails (no answer: it may reach the
// platform after it returned) is followed by the next one every after it
// returned, not every after it was due.
func TestStartSpacerSpacesAFailureFromItsEnd(t *testing.T) {
	const every = 30 * time.Millisecond
	s := NewStartSpacer(every, time.Millisecond)
	var ended time.Time
	_ = s.Do(context.Background(), "chat", func() error {
		time.Sleep(20 * time.Millisecond) // plays a call that times out
		ended = time.Now()
		return context.DeadlineExceeded
	})
	var started time.Time
	_ = s.Do(context.Background(), "chat", func() error { started = time.Now(); return nil })
	if gap := started.Sub(ended); gap < every {
		t.Errorf("next call %s after a failed one returned, want at least %s", gap, every)
	}
}

// BenchmarkSpacerBurst drains a burst of 100 calls of one key, each taking
// a tenth of the spacing (a post's latency against Slack's 1 s), spaced from
// the end and from the start of the previous call (with the Slack
// connector's floor, two thirds of the spacing): intervals/100 is the
// burst's length in spacings (at Slack's 1 s, that many seconds).
func BenchmarkSpacerBurst(b *testing.B) {
	const every, latency, n = 20 * time.Millisecond, 2 * time.Millisecond, 100
	for _, c := range []struct {
		name string
		new  func(time.Duration) *Spacer
	}{{"from=end", NewSpacer}, {"from=start", func(d time.Duration) *Spacer { return NewStartSpacer(d, d*2/3) }}} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				s := c.new(every)
				start := time.Now()
				for range n {
					_ = s.Do(context.Background(), "C1", func() error { time.Sleep(latency); return nil })
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total)/float64(b.N)/float64(every), "intervals/100")
		})
	}
}

// A call made with DoAhead is served before the calls waiting with Do
// (an answer before the other threads' new parents), after the DoAhead
// calls already waiting; each keeps the key's spacing. A waiter whose
// context ends leaves the line without holding up the others.
func TestSpacerDoAheadGoesFirst(t *testing.T) {
	s := NewSpacer(time.Millisecond)
	ctx := context.Background()
	gate := make(chan struct{})
	served := &trail{}
	call := served.call
	waiting := func(n int) { t.Helper(); waitLine(t, s, n) }
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Do(ctx, "chat", func() error { <-gate; return call("holder")() }) })
	waiting(0)
	wg.Go(func() { _ = s.Do(ctx, "chat", call("parent1")) })
	waiting(1)
	wg.Go(func() { _ = s.Do(ctx, "chat", call("parent2")) })
	waiting(2)
	gone, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- s.DoAhead(gone, "chat", call("abandoned")) }()
	waiting(3)
	wg.Go(func() { _ = s.DoAhead(ctx, "chat", call("answer1")) })
	waiting(4)
	wg.Go(func() { _ = s.DoAhead(ctx, "chat", call("answer2")) })
	waiting(5)
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Errorf("an abandoned waiter returned %v", err)
	}
	waiting(4)
	close(gate)
	wg.Wait()
	want := []string{"holder", "answer1", "answer2", "parent1", "parent2"}
	if order := served.names(); !slices.Equal(order, want) {
		t.Errorf("served %v, want %v", order, want)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl := s.keys["chat"]; sl.busy || len(sl.waiters) != 0 {
		t.Errorf("slot after all calls: busy %v, %d waiting", sl.busy, len(sl.waiters))
	}
}

// waitLine waits until the slot of key "chat" is held and n callers wait
// for it.
func waitLine(t *testing.T, s *Spacer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		busy, got := false, 0
		if sl := s.keys["chat"]; sl != nil {
			busy, got = sl.busy, len(sl.waiters)
		}
		s.mu.Unlock()
		if busy && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("held %v, %d callers waiting; want held, %d", busy, got, n)
		}
		time.Sleep(time.Millisecond) // polling the line, with a deadline
	}
}

// DoAhead calls go first, but not for ever: with answers always waiting, a
// new thread's parent goes after every aheadRun answers in a row.
func TestSpacerDoAheadDoesNotStarveDo(t *testing.T) {
	s := NewSpacer(time.Millisecond)
	ctx := context.Background()
	gate := make(chan struct{})
	served := &trail{}
	call := served.call
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Do(ctx, "chat", func() error { <-gate; return call("holder")() }) })
	waitLine(t, s, 0)
	n := 0
	for _, c := range []struct {
		name  string
		ahead bool
	}{{"p1", false}, {"p2", false}, {"a1", true}, {"a2", true}, {"a3", true}, {"a4", true}, {"a5", true}, {"a6", true}} {
		if c.ahead {
			wg.Go(func() { _ = s.DoAhead(ctx, "chat", call(c.name)) })
		} else {
			wg.Go(func() { _ = s.Do(ctx, "chat", call(c.name)) })
		}
		n++
		waitLine(t, s, n)
	}
	close(gate)
	wg.Wait()
	want := []string{"holder", "a1", "a2", "p1", "a3", "a4", "p2", "a5", "a6"}
	if order := served.names(); !slices.Equal(order, want) {
		t.Errorf("served %v, want %v", order, want)
	}
}

// trail records the calls a Spacer served, in order.
type trail struct {
	mu    sync.Mutex
	order []string
}

// call is a call that records name when it is served.
func (tr *trail) call(name string) func() error {
	return func() error {
		tr.mu.Lock()
		tr.order = append(tr.order, name)
		tr.mu.Unlock()
		return nil
	}
}

func (tr *trail) names() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.order)
}

// Share: once a key shares another's slot (from within a call of it), the
// calls of both wait for each other and are spaced as one key's; a key
// that already has its own slot is not joined.
func TestSpacerShare(t *testing.T) {
	s := NewSpacer(50 * time.Millisecond)
	ctx := context.Background()
	var end time.Time
	if err := s.Do(ctx, "user:u", func() error {
		if !s.Share("user:u", "chat") {
			t.Error("Share of an unused key: false")
		}
		end = time.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var start time.Time
	_ = s.Do(ctx, "chat", func() error { start = time.Now(); return nil })
	if gap := start.Sub(end); gap < 50*time.Millisecond {
		t.Errorf("a call of the shared key started %s after the other's ended, want at least 50ms", gap)
	}
	_ = s.Do(ctx, "own", func() error { return nil })
	if s.Share("user:u", "own") {
		t.Error("Share of a key with its own slot: true")
	}
}
