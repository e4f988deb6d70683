package store_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// TestEffectCacheFollowsTheOutbox: the cached read returns what
// PendingEffects returns after every change of the outbox: new effects, an
// effect rewritten in place (UpdateEffect: its new attempts, not the cached
// ones), a coalesced one replaced, delivered ones gone (and forgotten).
func TestEffectCacheFollowsTheOutbox(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	var c store.EffectCache
	same := func(step string) []store.Effect {
		t.Helper()
		var cached, fresh []store.Effect
		err := db.View(ctx, func(tx store.Tx) error {
			var err error
			if cached, err = c.Pending(tx, 0); err != nil {
				return err
			}
			fresh, err = store.PendingEffects(tx, 0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(cached)
		b, _ := json.Marshal(fresh)
		if string(a) != string(b) {
			t.Fatalf("%s: cached read\n%s\nwant what the outbox holds\n%s", step, a, b)
		}
		if c.Len() != len(fresh) {
			t.Fatalf("%s: the cache holds %d effects, the outbox %d", step, c.Len(), len(fresh))
		}
		return fresh
	}
	enqueue := func(e store.Effect) {
		t.Helper()
		if err := db.Update(ctx, func(tx store.Tx) error { return store.Enqueue(tx, &e) }); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(store.Effect{Queue: "q1", Payload: json.RawMessage(`{"op":"thread"}`)})
	enqueue(store.Effect{Queue: "q1", Coalesce: "status", Payload: json.RawMessage(`{"op":"update","n":1}`)})
	same("two enqueued")
	enqueue(store.Effect{Queue: "q2", Payload: json.RawMessage(`{"op":"reply"}`)})
	enqueue(store.Effect{Queue: "q1", Coalesce: "status", Payload: json.RawMessage(`{"op":"update","n":2}`)})
	got := same("one more, one coalesced")
	got[0].Attempts, got[0].LastError = 3, "slack: chat.postMessage: timeout"
	if err := db.Update(ctx, func(tx store.Tx) error { return store.UpdateEffect(tx, got[0]) }); err != nil {
		t.Fatal(err)
	}
	if after := same("one rewritten"); after[0].Attempts != 3 {
		t.Fatalf("rewritten effect read with attempts %d, want 3", after[0].Attempts)
	}
	if err := db.Update(ctx, func(tx store.Tx) error { return store.AckEffect(tx, got[0]) }); err != nil {
		t.Fatal(err)
	}
	same("one delivered")
}
