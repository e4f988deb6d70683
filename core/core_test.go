package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

const testConfig = `
owner: acme
owners: [console:you]
data_dir: %DIR%
rooms:
  - {name: main, console: true, agents: [coder], approvers: [console:you]}
agents:
  coder: {kind: exec, command: [/bin/false]}
`

// newBridge assembles a bridge on a real bolt file; nothing runs, so every
// effect stays in the outbox to be read.
func newBridge(t *testing.T) (*core.Bridge, *bolt.DB) {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(strings.ReplaceAll(testConfig, "%DIR%", dir)))
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b, err := core.New(context.Background(), core.Options{Config: cfg, Store: db, APIToken: "t",
		Surfaces: []string{chat.Console}, NoRuntimeMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	return b, db
}

// TestObserversInOrder: every request observer is registered, in the order
// the core depends on (see core.observers for why).
func TestObserversInOrder(t *testing.T) {
	b, _ := newBridge(t)
	want := []string{"metrics", "threads", "approvals", "delegation"}
	if got := b.Observers(); !slices.Equal(got, want) {
		t.Fatalf("observers %v, want %v", got, want)
	}
}

// TestObserversActInOneTransaction: a member's ask, in the transaction that
// creates it, gets its thread parent, then its approval card as a reply in
// that thread (approvals after threads), and is counted in the store's
// request metrics.
func TestObserversActInOneTransaction(t *testing.T) {
	b, db := newBridge(t)
	ctx := context.Background()
	r, err := b.Requests().Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console,
		User: "console:bob", Text: "check it"})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != requests.Pending {
		t.Fatalf("state %s, want pending", r.State)
	}
	var ops []string
	err = db.View(ctx, func(tx store.Tx) error {
		effects, err := store.PendingEffects(tx, 0)
		for _, e := range effects {
			var eff threads.Effect
			if err := json.Unmarshal(e.Payload, &eff); err != nil {
				return err
			}
			if eff.Request == r.ID.String() {
				ops = append(ops, string(eff.Op)+":"+eff.Message.Kind)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) < 2 || ops[0] != "thread:parent" || !slices.Contains(ops[1:], "reply:approval") {
		t.Fatalf("effects of %s: %v; want the thread parent first, then the approval card in it", r.ID, ops)
	}
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), `roombridge_requests{agent="coder",state="pending"} 1`) {
		t.Fatalf("metrics do not count the pending request:\n%s", body)
	}
}

// TestLeaderTermResetsQueueCounts: each leader term starts by forgetting
// the stored queue counts (an older binary that led may have left one
// stale), so the first creation of each agent counts its queue afresh.
func TestLeaderTermResetsQueueCounts(t *testing.T) {
	b, db := newBridge(t)
	ctx := context.Background()
	stale := []byte{0, 0, 0, 0, 0, 0, 3, 232} // 1000: the queue limit, refusing every creation
	if err := db.Update(ctx, func(tx store.Tx) error { return tx.Put("agent_queue_len", "acme/coder", stale) }); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		verr := db.View(ctx, func(tx store.Tx) error { _, err = tx.Get("agent_queue_len", "acme/coder"); return nil })
		if verr != nil {
			t.Fatal(verr)
		}
		if errors.Is(err, store.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stale queue count is still stored after the term began (Get: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
