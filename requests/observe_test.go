package requests_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// TestObservers: observers run in the create/apply transaction; an error
// from one rolls everything back.
func TestObservers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	fail := ""
	var seen []string
	f.svc.AddObserver("test", func(tx store.Tx, before, after *requests.Request) error {
		from := "-"
		if before != nil {
			from = before.State.String()
		}
		// Writes of the observer commit with the change.
		if err := tx.Put("observed", after.ID.Key()+"/"+from+">"+after.State.String(), nil); err != nil {
			return err
		}
		// The observer sees its own transaction's audit record.
		recs := 0
		_ = tx.Scan("audit_by_request", after.ID.String()+"/", store.PrefixEnd(after.ID.String()+"/"), func(string, []byte) error {
			recs++
			return nil
		})
		seen = append(seen, fmt.Sprintf("%s %s>%s audit=%d", after.ID, from, after.State, recs))
		if fail != "" && strings.Contains(after.Ask, fail) {
			return fmt.Errorf("observer says no to %s", after.ID)
		}
		return nil
	})
	r := f.create(t, ask("fine"))
	f.apply(t, r.ID, requests.Approve)
	want := []string{"R20261129-01 ->pending audit=1", "R20261129-01 pending>approved audit=2"}
	if !slices.Equal(seen, want) {
		t.Errorf("observer saw %v\nwant %v", seen, want)
	}
	var keys []string
	_ = f.db.View(ctx, func(tx store.Tx) error {
		return tx.Scan("observed", "", "", func(k string, _ []byte) error { keys = append(keys, k); return nil })
	})
	if len(keys) != 2 {
		t.Errorf("observer writes %v", keys)
	}

	fail = "bad"
	before := dump(t, f.db)
	if _, err := f.svc.Create(ctx, ask("bad one")); err == nil || !strings.Contains(err.Error(), "observer says no") {
		t.Errorf("create with a failing observer: %v", err)
	}
	if dump(t, f.db) != before {
		t.Error("a create rolled back by an observer left traces")
	}
	r2 := f.create(t, ask("good"))
	if r2.ID.Seq() != 2 {
		t.Errorf("next ID %s: the rolled-back create used a number", r2.ID)
	}
	// Apply rolled back by the observer.
	fail = "good"
	before = dump(t, f.db)
	if _, err := f.svc.Apply(ctx, r2.ID, requests.Change{Event: requests.Approve, Actor: "t"}); err == nil {
		t.Error("apply with a failing observer succeeded")
	}
	if dump(t, f.db) != before {
		t.Error("an apply rolled back by an observer changed the store")
	}
	if got, _ := f.svc.Get(ctx, r2.ID); got.State != requests.Pending || got.Version != 1 {
		t.Errorf("after rollback: %+v", got)
	}
}

// TestNotifications: creates and changes wake the requests topic and the
// agent's topic once committed.
func TestNotifications(t *testing.T) {
	f := newFixture(t)
	reqs, stop1 := f.db.Subscribe(requests.TopicRequests)
	defer stop1()
	coder, stop2 := f.db.Subscribe(requests.TopicAgent("coder"))
	defer stop2()
	other, stop3 := f.db.Subscribe(requests.TopicAgent("reviewer"))
	defer stop3()
	r := f.create(t, ask("x"))
	for name, ch := range map[string]<-chan struct{}{"requests": reqs, "agent:coder": coder} {
		select {
		case <-ch:
		default:
			t.Errorf("no signal on %s after create", name)
		}
	}
	select {
	case <-other:
		t.Error("reviewer woken by coder's request")
	default:
	}
	f.apply(t, r.ID, requests.Approve)
	select {
	case <-coder:
	default:
		t.Error("no signal on agent:coder after approve")
	}
}
