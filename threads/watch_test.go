package threads_test

import (
	"testing"
)

// TestWatchLiveText: a watcher gets the text so far at once, then the whole
// text after each delta (the newest only when it lags), anew after Said,
// and nothing of an ended turn; a cancelled watcher gets nothing more.
func TestWatchLiveText(t *testing.T) {
	f := newFixture(t)
	r := f.create(t)
	l, stop := startLive(t, f, newStreamer())
	defer stop()
	id := r.ID.String()

	l.Delta(r, "Hello")
	text, cancel := l.Watch(id)
	defer cancel()
	if got := <-text; got != "Hello" {
		t.Fatalf("first text %q, want the text so far", got)
	}
	l.Delta(r, ", ")
	l.Delta(r, "world")
	if got := <-text; got != "Hello, world" {
		t.Fatalf("lagging watcher got %q, want the newest whole text", got)
	}
	select {
	case got := <-text:
		t.Fatalf("a stale text %q is left", got)
	default:
	}
	l.Said(r)
	if got := <-text; got != "" {
		t.Fatalf("after Said %q, want the text to start anew", got)
	}
	l.Delta(r, "again")
	if got := <-text; got != "again" {
		t.Fatalf("after Said and a delta %q", got)
	}
	l.Ended(r)
	late, cancelLate := l.Watch(id)
	defer cancelLate()
	select {
	case got := <-late:
		t.Fatalf("an ended turn's text %q is still kept", got)
	default:
	}
	cancel()
	l.Delta(r, "next turn")
	select {
	case got := <-text:
		t.Fatalf("a cancelled watcher got %q", got)
	default:
	}
	if got := <-late; got != "next turn" {
		t.Fatalf("the next turn's text %q", got)
	}
}
