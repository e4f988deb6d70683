package threads

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/roombridge/roombridge/store"
)

// The threads that exist (a reply, an edit, a direct message next) are
// delivered before the threads still to be posted; each group keeps the
// order of its oldest effect.
func TestAnswersFirst(t *testing.T) {
	var seq uint64
	effect := func(op Op) store.Effect {
		p, err := json.Marshal(Effect{Op: op, Request: "R"})
		if err != nil {
			t.Fatal(err)
		}
		seq++
		return store.Effect{Seq: seq, Payload: p}
	}
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
	if want := []string{"answer1", "edit", "dm", "new1", "new2", "new3"}; !slices.Equal(r.order, want) {
		t.Errorf("order %v, want %v", r.order, want)
	}
}
