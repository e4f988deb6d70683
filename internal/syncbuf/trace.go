package syncbuf

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Trace is a list of lines safe for concurrent writers, which a test can
// wait on: code under test adds what happens ("start a1", "enter:x"), the
// test awaits a line. The zero value is empty and ready to use.
type Trace struct {
	mu    sync.Mutex
	lines []string
	wake  chan struct{} // closed and replaced on every Add
}

// wakeLocked is the channel the next Add closes (t.mu held).
func (t *Trace) wakeLocked() chan struct{} {
	if t.wake == nil {
		t.wake = make(chan struct{})
	}
	return t.wake
}

// Add appends s and wakes the waiters.
func (t *Trace) Add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	close(t.wakeLocked())
	t.wake = nil
}

// Has reports whether the trace holds s.
func (t *Trace) Has(s string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Contains(t.lines, s)
}

// Lines returns the lines so far.
func (t *Trace) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.lines)
}

// Await waits (up to within) until the trace holds s, failing tb if it
// never does.
func (t *Trace) Await(tb testing.TB, s string, within time.Duration) {
	tb.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		found, wake := slices.Contains(t.lines, s), t.wakeLocked()
		t.mu.Unlock()
		if found {
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			tb.Fatalf("waiting for %q in the trace %q", s, t.Lines())
		}
	}
}
