package ttl_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/ttl"
)

// fakeExpirer is an in-memory expiry index: the sweeper's own logic is what
// these tests exercise (approvals_test runs it on the real store).
type fakeExpirer struct {
	mu      sync.Mutex
	due     map[string]time.Time
	fail    map[string]bool
	fenced  bool
	moves   map[string]time.Time // on Expire, the timer moves there (a notice's next one) instead of going
	tries   map[string]int
	panics  atomic.Int32 // panics left to throw
	calls   atomic.Int32
	expired []string
}

func newFake(n int, at time.Time) *fakeExpirer {
	f := &fakeExpirer{due: map[string]time.Time{}, fail: map[string]bool{}}
	for i := 0; i < n; i++ {
		f.due[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = at
	}
	return f
}

func (f *fakeExpirer) Due(_ context.Context, now time.Time, after store.Timer, limit int) ([]store.Timer, error) {
	f.calls.Add(1)
	if f.panics.Load() > 0 {
		f.panics.Add(-1)
		panic("boom")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Timer
	for id, at := range f.due {
		if !at.After(now) {
			out = append(out, store.Timer{Kind: "fake", ID: id, Due: at})
		}
	}
	// The expiry index's order: by due time (ms), then ID; from after on.
	cmp := func(a, b store.Timer) int {
		if c := a.Due.UnixMilli() - b.Due.UnixMilli(); c != 0 {
			return int(c / max(c, -c))
		}
		return strings.Compare(a.ID, b.ID)
	}
	slices.SortFunc(out, cmp)
	if after.ID != "" {
		out = slices.DeleteFunc(out, func(t store.Timer) bool { return cmp(t, after) <= 0 })
	}
	if limit > 0 {
		out = out[:min(limit, len(out))]
	}
	return out, nil
}

func (f *fakeExpirer) Expire(_ context.Context, t store.Timer, _ time.Time) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenced {
		return false, store.ErrFenced
	}
	if f.fail[t.ID] {
		return false, errors.New("disk on fire")
	}
	if f.tries == nil {
		f.tries = map[string]int{}
	}
	f.tries[t.ID]++
	if at, ok := f.moves[t.ID]; ok {
		f.due[t.ID] = at
		return true, nil
	}
	delete(f.due, t.ID)
	f.expired = append(f.expired, t.ID)
	return true, nil
}

func (f *fakeExpirer) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.due)
}

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func TestSweepOncePagesAndSkipsFailures(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFake(100, t0.Add(time.Minute))
	f.fail["a"] = true
	s, err := ttl.New(ttl.Options{Clock: clk, Page: 7, Parallel: 3}, f)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.SweepOnce(context.Background()); err != nil || res.Due != 0 {
		t.Fatalf("before due: %+v, %v", res, err)
	}
	clk.Advance(time.Minute)
	res, err := s.SweepOnce(context.Background())
	if err == nil || res.Expired != 99 || res.Failed != 1 || f.left() != 1 {
		t.Fatalf("sweep: %+v, %v; %d left", res, err, f.left())
	}
}

// A sweep reads its pages from the timer that ended the one before: timers
// due in the same millisecond across a page's end are each expired once,
// and a timer that moves on to a later time still due (a notice's next one)
// is found again but tried once a sweep.
func TestSweepCursorTriesEachTimerOnce(t *testing.T) {
	clk := clock.NewFake(t0.Add(time.Minute))
	f := newFake(40, t0) // all due in one millisecond
	f.moves = map[string]time.Time{}
	for _, id := range []string{"a", "b", "ax", "nx"} {
		f.moves[id] = t0.Add(30 * time.Second)
	}
	s, err := ttl.New(ttl.Options{Clock: clk, Page: 3, Parallel: 2, Batch: 2}, f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.SweepOnce(context.Background())
	if err != nil || res.Expired != 40 || res.Due != 40 || f.left() != 4 {
		t.Fatalf("sweep: %+v, %v; %d left, want the 4 moved ones", res, err, f.left())
	}
	for id, n := range f.tries {
		if n != 1 {
			t.Errorf("timer %s tried %d times in one sweep", id, n)
		}
	}
	if len(f.tries) != 40 {
		t.Fatalf("%d timers tried, want 40", len(f.tries))
	}
	if res, err := s.SweepOnce(context.Background()); err != nil || res.Due != 4 || f.tries["a"] != 2 {
		t.Fatalf("next sweep: %+v, %v; a tried %d times, want the moved ones again", res, err, f.tries["a"])
	}
}

// A fenced write (leadership lost) stops the sweep at once.
func TestSweepStopsWhenFenced(t *testing.T) {
	f := newFake(50, t0)
	f.fenced = true
	s, err := ttl.New(ttl.Options{Clock: clock.NewFake(t0), Parallel: 1}, f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.SweepOnce(context.Background())
	if !errors.Is(err, store.ErrFenced) || res.Failed != 1 || f.left() != 50 {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestBadSpecNamesTheKey(t *testing.T) {
	_, err := ttl.New(ttl.Options{Spec: "every minute"})
	if err == nil || !strings.Contains(err.Error(), "approvals.sweep") {
		t.Fatalf("%v", err)
	}
}

// Start sweeps at once, then on the schedule; a panic in a run is recovered
// (cron.Recover) and the next run happens; Stop waits and is idempotent.
func TestStartRecoversPanicsAndStops(t *testing.T) {
	clk := clock.NewFake(t0)
	f := newFake(3, t0)
	f.panics.Store(1) // the immediate run panics
	s, err := ttl.New(ttl.Options{Clock: clk, Spec: "@every 1s"}, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); !errors.Is(err, ttl.ErrRunning) {
		t.Fatalf("second Start: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.left() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduled run after the panic did not expire the items (calls %d)", f.calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	s.Stop()
	calls := f.calls.Load()
	// Restartable (a new leadership term), and ctx ending stops it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	if err := s.Start(ctx2); err != nil {
		t.Fatal(err)
	}
	for f.calls.Load() == calls {
		if time.Now().After(deadline) {
			t.Fatal("the restarted sweeper did not sweep at once")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel2()
	s.Stop()
}

// batchFake is a fakeExpirer that also expires in batches, all or nothing
// (as one transaction does), of at most max timers (0: any), recording
// each batch's size.
type batchFake struct {
	*fakeExpirer
	max   int
	sizes []int
}

func (f *batchFake) MaxBatch() int {
	if f.max == 0 {
		return 1 << 20
	}
	return f.max
}

func (f *batchFake) ExpireBatch(_ context.Context, ts []store.Timer, _ time.Time) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sizes = append(f.sizes, len(ts))
	for _, t := range ts {
		if f.fail[t.ID] {
			return nil, errors.New("disk on fire")
		}
	}
	out := make([]bool, len(ts))
	for i, t := range ts {
		delete(f.due, t.ID)
		f.expired = append(f.expired, t.ID)
		out[i] = true
	}
	return out, nil
}

// A BatchExpirer gets batches of at most Options.Batch; a batch that fails is
// expired one by one, so only its bad item is left.
func TestSweepBatchesAndIsolatesAFailedBatch(t *testing.T) {
	f := &batchFake{fakeExpirer: newFake(100, t0)}
	f.fail["a"] = true
	s, err := ttl.New(ttl.Options{Clock: clock.NewFake(t0), Page: 30, Parallel: 2, Batch: 8}, f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.SweepOnce(context.Background())
	if err == nil || res.Expired != 99 || res.Failed != 1 || res.Due != 100 || f.left() != 1 {
		t.Fatalf("sweep: %+v, %v; %d left", res, err, f.left())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	batched := 0
	for _, n := range f.sizes {
		if n > 8 {
			t.Errorf("a batch of %d, want at most 8", n)
		}
		batched += n
	}
	if len(f.sizes) > 100/8+100/30+2 || batched < 100 {
		t.Errorf("batches %v: want the 100 timers in batches of up to 8", f.sizes)
	}
}

// A BatchExpirer's batches are of its MaxBatch, fewer only where
// Options.Batch says so.
func TestSweepBatchesByMaxBatch(t *testing.T) {
	for _, c := range []struct{ max, opt, want int }{{5, 0, 5}, {5, 8, 5}, {5, 3, 3}} {
		f := &batchFake{fakeExpirer: newFake(40, t0), max: c.max}
		s, err := ttl.New(ttl.Options{Clock: clock.NewFake(t0), Page: 40, Parallel: 1, Batch: c.opt}, f)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.SweepOnce(context.Background()); err != nil || res.Expired != 40 {
			t.Fatalf("sweep: %+v, %v", res, err)
		}
		f.mu.Lock()
		for i, n := range f.sizes {
			if n != c.want && (n > c.want || i != len(f.sizes)-1) {
				t.Errorf("MaxBatch %d, Options.Batch %d: batches %v, want %d each", c.max, c.opt, f.sizes, c.want)
				break
			}
		}
		f.mu.Unlock()
	}
}
