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
	d.answersFirst(r)
	d.answersFirst(r) // again, from the ops it keeps: the same order
	if want := []string{"answer1", "edit", "new1", "dm", "new2", "new3"}; !slices.Equal(r.order, want) {
		t.Errorf("order %v, want %v", r.order, want)
	}
}

// With more threads answering than there are workers, a new thread's
// parent is still among the threads the first workers take.
func TestAnswersFirstLeavesParentsAWorker(t *testing.T) {
	effect := effects(t)
	r := round{queues: map[string][]store.Effect{}}
	add := func(name string, head Op) {
		r.order = append(r.order, name)
		r.queues[name] = []store.Effect{effect(head)}
	}
	for i := range parallelQueues + 4 {
		add(fmt.Sprintf("answer%d", i), OpReply)
	}
	add("new", OpThread)
	(&Deliverer{}).answersFirst(r)
	if i := slices.Index(r.order, "new"); i < 0 || i >= parallelQueues {
		t.Errorf("the new thread is at %d of %v: the %d workers go to answers only", i, r.order, parallelQueues)
	}
	if len(r.order) != parallelQueues+5 {
		t.Errorf("order %v: %d threads, want %d", r.order, len(r.order), parallelQueues+5)
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
