package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// storeOpsConfig is a single node with one console room and a queue limit
// above what the tests create.
func storeOpsConfig(data string) string {
	return fmt.Sprintf(`owner: acme
owners: [console:alice]
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
requests: {queue_limit: 100000}
rooms:
  - {name: main, console: true, agents: [coder]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
`, data, bridgeBin)
}

// TestNewerStoreRefused: a bridge started on a store of a format newer than
// it knows exits at once, naming both formats and what to do, and leaves
// the store as it was.
func TestNewerStoreRefused(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	db, err := bolt.Open(filepath.Join(data, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(context.Background(), func(tx store.Tx) error { return store.WriteFormat(tx, 99) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, storeOpsConfig(data))
	for _, args := range [][]string{{"run", "--config", cfg}, {"store", "migrate", "--dry-run", "--config", cfg}} {
		_, stderr, code := runCLI(t, dir, args...)
		if code != 1 || !strings.Contains(stderr, "the store is in format 99, newer than this binary knows (format 2)") ||
			!strings.Contains(stderr, "run a bridge binary that knows format 99 or later") {
			t.Errorf("%v on a format 99 store: exit %d, stderr %q; want 1 and the message naming both formats", args, code, stderr)
		}
	}
	st := openStore(t, data)
	defer st.close()
	var f int
	_ = st.db.View(context.Background(), func(tx store.Tx) error { f, err = store.ReadFormat(tx); return err })
	if f != 99 {
		t.Errorf("the store's format is %d after the refusals, want 99", f)
	}
}

// TestStoreToolsNeedAStore: `store backup` and `store migrate` where no
// store is (a wrong --config or working directory, a cron job's) fail
// naming the path, and create nothing.
func TestStoreToolsNeedAStore(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, storeOpsConfig(data))
	for _, args := range [][]string{
		{"store", "backup", filepath.Join(dir, "b.jsonl"), "--config", cfg},
		{"store", "migrate", "--dry-run", "--config", cfg},
		{"store", "migrate", "--config", cfg},
	} {
		_, stderr, code := runCLI(t, dir, args...)
		if code != 1 || !strings.Contains(stderr, "no store at "+filepath.Join(data, "bridge.db")) {
			t.Errorf("%v without a store: exit %d, stderr %q; want 1, naming the missing store", args, code, stderr)
		}
	}
	for _, p := range []string{filepath.Join(data, "bridge.db"), filepath.Join(dir, "b.jsonl")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the refusals: %v; want none", p, err)
		}
	}
}

// TestBackupUnderLoad: `bridge store backup` while 16 clients create
// requests through the API, then `bridge store restore` into an empty data
// dir: every request acknowledged before the backup began is in the
// restored store, each with its create record, and the audit sequence has
// no gap.
func TestBackupUnderLoad(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, storeOpsConfig(data))
	p := startBridge(t, dir, nil, "run", "--config", cfg)
	base, token := p.api(data)

	var mu sync.Mutex
	var acked []requests.ID
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var r requests.Request
				code, err := apiCall(http.MethodPost, base+"/v1/requests", token,
					map[string]string{"room": "main", "text": fmt.Sprintf("echo c%d-%d", c, i)}, &r)
				if err != nil || code != http.StatusCreated {
					t.Errorf("create: HTTP %d, %v", code, err)
					return
				}
				mu.Lock()
				acked = append(acked, r.ID)
				mu.Unlock()
			}
		})
	}
	waitFor(t, "200 acknowledged creations", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 200 })
	mu.Lock()
	before := append([]requests.ID(nil), acked...)
	mu.Unlock()
	out, stderr, code := runCLI(t, dir, "store", "backup", filepath.Join(dir, "backup.jsonl"), "--config", cfg)
	waitFor(t, "more creations after the backup", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= len(before)+100 })
	close(stop)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "backup: ") {
		t.Fatalf("store backup: exit %d, %s%s", code, out, stderr)
	}

	// Restore into an empty data dir; not into the running one.
	if _, stderr, code := runCLI(t, dir, "store", "restore", filepath.Join(dir, "backup.jsonl"), "--config", cfg); code == 0 ||
		!strings.Contains(stderr, "refused") {
		t.Errorf("restore onto the running bridge: exit %d, %s; want a refusal", code, stderr)
	}
	data2 := filepath.Join(dir, "restored")
	cfg2 := filepath.Join(dir, "restored.yaml")
	writeFile(t, cfg2, storeOpsConfig(data2))
	if out, stderr, code := runCLI(t, dir, "store", "restore", filepath.Join(dir, "backup.jsonl"), "--config", cfg2); code != 0 {
		t.Fatalf("store restore: exit %d, %s%s", code, out, stderr)
	}
	st := openStore(t, data2)
	defer st.close()
	for _, id := range before {
		if r := st.get(id); r == nil || st.count(id, "create") != 1 {
			t.Fatalf("%s, acknowledged before the backup: %v in the restored store, %d create records", id, r != nil, st.count(id, "create"))
		}
	}
	recs, err := audit.List(context.Background(), st.db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("audit record %d has seq %d: the chain is broken", i+1, r.Seq)
		}
	}
	if last := recs[len(recs)-1]; last.Action != actionRestored || !strings.Contains(last.Detail, "from backup.jsonl") {
		t.Errorf("the restored store's last audit record: %+v; want the restore (%s)", last, actionRestored)
	}
	t.Logf("backup under load: %d acknowledged before it, %d audit records restored; %s", len(before), len(recs), strings.TrimSpace(out))
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
