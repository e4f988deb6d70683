package lanes_test

import (
	"slices"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/lanes"
	"github.com/roombridge/roombridge/internal/syncbuf"
)

const waitFor = 30 * time.Second

// job is a test job: its name, and a gate it waits at (nil: none).
type job struct {
	name string
	gate chan struct{}
}

// trace records the jobs' starts and ends, and wakes waiters on each.
type trace struct{ syncbuf.Trace }

func newTrace() *trace { return &trace{} }

func (tr *trace) do(j job) {
	tr.Add("start " + j.name)
	if j.gate != nil {
		<-j.gate
	}
	tr.Add("end " + j.name)
}

// While a job is held, jobs of other keys and jobs without a key run; a
// later job of the held job's key waits, and runs once it has ended.
func TestKeysRunConcurrentlyALaneInOrder(t *testing.T) {
	l := lanes.New[job](16)
	tr := newTrace()
	quit := make(chan struct{})
	ran := make(chan struct{})
	go func() { defer close(ran); l.Run(2, quit, tr.do) }()
	defer func() { close(quit); <-ran }()

	gate := make(chan struct{})
	mustAdd(t, l, "a", job{name: "a1", gate: gate})
	tr.Await(t, "start a1", waitFor)
	mustAdd(t, l, "a", job{name: "a2"})
	mustAdd(t, l, "b", job{name: "b1"})
	mustAdd(t, l, "", job{name: "x"})
	mustAdd(t, l, "", job{name: "y"})
	for _, s := range []string{"end b1", "end x", "end y"} {
		tr.Await(t, s, waitFor)
	}
	if got := tr.Lines(); slices.Contains(got, "start a2") {
		t.Fatalf("a2 started while a1 was held: %q", got)
	}
	close(gate)
	tr.Await(t, "end a2", waitFor)
	got := tr.Lines()
	if slices.Index(got, "start a2") < slices.Index(got, "end a1") {
		t.Errorf("a2 started before a1 ended: %q", got)
	}
}

// The lanes hold at most their limit of jobs, running ones included: Add
// refuses more, and takes again once a job has ended.
func TestLimit(t *testing.T) {
	l := lanes.New[job](2)
	mustAdd(t, l, "a", job{name: "a1"})
	mustAdd(t, l, "", job{name: "x"})
	if l.Add("b", job{name: "b1"}) {
		t.Fatal("a third job was taken with a limit of 2")
	}
	tr := newTrace()
	quit := make(chan struct{})
	close(quit) // run what is queued, then return
	l.Run(1, quit, tr.do)
	if got := tr.Lines(); len(got) != 4 {
		t.Fatalf("ran %q, want a1 and x", got)
	}
	mustAdd(t, l, "b", job{name: "b1"})
	mustAdd(t, l, "b", job{name: "b2"})
}

// After quit, Run still runs every queued job, a lane's in order, and then
// returns.
func TestQuitDrains(t *testing.T) {
	l := lanes.New[job](64)
	for i := range 20 {
		mustAdd(t, l, "k", job{name: string(rune('a' + i))})
		mustAdd(t, l, "", job{name: "free"})
	}
	tr := newTrace()
	quit := make(chan struct{})
	close(quit)
	l.Run(4, quit, tr.do)
	var keyed []string
	for _, s := range tr.Lines() {
		if s != "start free" && s != "end free" && s[:3] == "end" {
			keyed = append(keyed, s[4:])
		}
	}
	want := []string{}
	for i := range 20 {
		want = append(want, string(rune('a'+i)))
	}
	if !slices.Equal(keyed, want) {
		t.Errorf("lane k ran %q, want %q", keyed, want)
	}
	if got := len(tr.Lines()); got != 80 {
		t.Errorf("%d trace entries, want 80 (40 jobs)", got)
	}
}

func mustAdd(t *testing.T, l *lanes.Lanes[job], key string, j job) {
	t.Helper()
	if !l.Add(key, j) {
		t.Fatalf("Add(%q, %s) refused", key, j.name)
	}
}
