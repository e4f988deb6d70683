package threads

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/roombridge/roombridge/store"
)

// The threads that exist (a reply, an edit, a direct message next) are
// delivered before the threads still to be posted, but at most two in a
// row while one still to be posted waits; each group keeps the order of
// its oldest effect.
func TestAnswersFirst(t *testing.T) {
	effect := effects(t)
	r := round{queues: map[string][]store.Effect{}}
	for _, q := range []struct {
		name string
		head Op
	}{{"new1", OpThread}, {"new2", OpThread}, {"answer1", OpReply}, {"new3", OpThread}, {"edit", OpUpdate}, {"dm", OpDirect}} {
		r.order = append(r.order, q.name)
		r.queues[q.name] = []store.Effect{effect(q.head), effect(OpReply)}
	}
	d := &Deliverer{}
	d.answersFirst(&r, 0)
	d.answersFirst(&r, 0) // again, from the ops it keeps: the same order
	if want := []string{"answer1", "edit", "new1", "dm", "new2", "new3"}; !slices.Equal(r.order, want) {
		t.Errorf("order %v, want %v", r.order, want)
	}
}

// With more threads answering than there are workers, a new thread's
// parent gets a worker after two answers: in the first round, where every
// worker is free, and when the workers free up one at a time, each freed
// worker starting the first thread of a new round (dispatch).
func TestAnswersFirstLeavesParentsAWorker(t *testing.T) {
	effect := effects(t)
	r := round{queues: map[string][]store.Effect{}}
	add := func(name string, head Op) {
		r.order = append(r.order, name)
		r.queues[name] = []store.Effect{effect(head)}
	}
	for i := range 3 * parallelQueues {
		add(fmt.Sprintf("answer%d", i), OpReply)
	}
	news := []string{"new1", "new2", "new3", "new4"} // more than the first round starts
	for _, q := range news {
		add(q, OpThread)
	}
	d := &Deliverer{}
	var run answerRun
	d.answersFirst(&r, run)
	if i := slices.Index(r.order, "new1"); i != answersInARow {
		t.Fatalf("the first new thread is at %d of %v, want %d", i, r.order, answersInARow)
	}
	// The first round fills every worker; then one frees at a time and
	// takes the first thread of the next round, whose order starts from
	// the run of answers already started.
	var starts []string
	all := slices.Clone(r.order)
	for _, q := range all[:parallelQueues] {
		run.started(r.parent[q])
		starts = append(starts, q)
	}
	for len(starts) < len(all) {
		next := round{queues: r.queues}
		for _, q := range all {
			if !slices.Contains(starts, q) {
				next.order = append(next.order, q)
			}
		}
		d.answersFirst(&next, run)
		run.started(next.parent[next.order[0]])
		starts = append(starts, next.order[0])
	}
	for _, q := range news {
		i := slices.Index(starts, q)
		before := 0
		for _, p := range starts[max(0, i-answersInARow-1):i] {
			if !r.parent[p] {
				before++
			}
		}
		if i < 0 || before > answersInARow {
			t.Errorf("%s started at %d of %v, after %d answers in a row: want at most %d", q, i, starts, before, answersInARow)
		}
	}
}

// effects makes outbox effects of one request with the op given, in
// sequence.
func effects(t *testing.T) func(Op) store.Effect {
	var seq uint64
	return func(op Op) store.Effect {
		p, err := json.Marshal(Effect{Op: op, Request: "R"})
		if err != nil {
			t.Fatal(err)
		}
		seq++
		return store.Effect{Seq: seq, Payload: p}
	}
}
