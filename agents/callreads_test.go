package agents_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// countingStore is a real store that counts its read-only transactions
// (View) and the Gets of every transaction.
type countingStore struct {
	store.Store
	views, gets atomic.Int64
}

func (c *countingStore) View(ctx context.Context, fn func(store.Tx) error) error {
	c.views.Add(1)
	return c.Store.View(ctx, func(tx store.Tx) error { return fn(getCounter{tx, &c.gets}) })
}

func (c *countingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return c.Store.Update(ctx, func(tx store.Tx) error { return fn(getCounter{tx, &c.gets}) })
}

type getCounter struct {
	store.Tx
	gets *atomic.Int64
}

func (t getCounter) Get(bucket, key string) ([]byte, error) {
	t.gets.Add(1)
	return t.Tx.Get(bucket, key)
}

// TestCallReadsInItsTransaction: an MCP call with a key (a
// report_progress sent by the runner's proxy) reads the store only in the
// transaction that carries it out: no read of the request before it to
// name its journal key (before: one View and one Get more, a request read
// whose result the transaction read again).
func TestCallReadsInItsTransaction(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	cs := &countingStore{Store: db}
	svc := requests.NewService(cs, clock.Real{}, "acme", []string{alice})
	ctx := context.Background()
	r, err := svc.Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: "console", User: alice, Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	s := agents.NewScheduler(svc, nil, nil)
	call := func(key string) (views, gets int64) {
		t.Helper()
		v0, g0 := cs.views.Load(), cs.gets.Load()
		resp := s.Call(ctx, r.ID, agents.TurnEvent{Type: agents.EventProgress, ID: key, Percent: 40, Text: "halfway"})
		if !resp.OK {
			t.Fatalf("report_progress: %+v", resp)
		}
		return cs.views.Load() - v0, cs.gets.Load() - g0
	}
	unkeyed, unkeyedGets := call("")
	views, gets := call("k-1")
	if views != unkeyed || views != 0 {
		t.Errorf("the keyed call made %d read-only transactions (the unkeyed one %d), want none", views, unkeyed)
	}
	// The keyed call's transaction reads the request, and its journal
	// entry: one Get more than the unkeyed one.
	if gets > unkeyedGets+2 {
		t.Errorf("the keyed call made %d Gets, the unkeyed one %d: want at most 2 more (its guard's request and journal entry)", gets, unkeyedGets)
	}
	t.Logf("unkeyed: %d views, %d gets; keyed: %d views, %d gets", unkeyed, unkeyedGets, views, gets)
}
