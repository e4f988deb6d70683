package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/migrate"
)

// format1Fixture is a store the format 1 binary wrote
// (testdata/stores/format1/generate.sh).
const format1Fixture = "../../testdata/stores/format1/bridge.db"

// extraTimers are dedupe keys with format 1's timers added to the fixture,
// so that the migration takes several batches.
const extraTimers = 2500

// fixtureDir copies the fixture into dir/.roombridge (the data dir of the
// bridge with no config, which wrote it) and adds extraTimers dedupe keys
// as format 1 wrote them; it returns every key of the result.
func fixtureDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(format1Fixture)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, ".roombridge")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "bridge.db"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(data, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp := time.Now().Add(24 * time.Hour)
	err = db.Update(context.Background(), func(tx store.Tx) error {
		for i := range extraTimers {
			k := fmt.Sprintf("ask:console:extra%05d", i)
			if err := store.Remember(tx, k, nil, time.Now(), time.Until(exp)); err != nil {
				return err
			}
			if err := store.AddTimer(tx, "dedupe", exp, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dumpKeys(t, db)
}

func dumpKeys(t *testing.T, db *bolt.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := db.Dump(context.Background(), func(b, k string, v []byte) error { out[b+"/"+k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrationCrashAnywhere: `bridge store migrate` on the format 1
// fixture is SIGKILLed at its first and second batch and at the commit of
// its end; each restart goes on; the migration ends once (one
// store_migrated record, format 2), no key but the dedupe timers is lost
// or changed. Then a bridge runs on the migrated store: its requests are
// all there, an API ask's Idempotency-Key still replays, the request
// waiting for approval is approved and runs.
func TestMigrationCrashAnywhere(t *testing.T) {
	dir := t.TempDir()
	before := fixtureDir(t, dir)
	out, stderr, code := runCLI(t, dir, "store", "migrate", "--dry-run")
	if code != 0 || !strings.Contains(out, "would migrate: format 1 -> 2 (lean-dedupe)") {
		t.Fatalf("dry run: exit %d: %s%s", code, out, stderr)
	}
	for _, fp := range []string{failpoint.MigrateBatch + "@1", failpoint.MigrateBatch + "@2", failpoint.MigrateDone} {
		cmd := cliCmd(dir, "store", "migrate")
		cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+fp)
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "failpoint") {
			t.Fatalf("migrate with %s: %v, %s; want killed at the failpoint", fp, err, b)
		}
	}
	out, stderr, code = runCLI(t, dir, "store", "migrate")
	if code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("migrate after the crashes: exit %d: %s%s; want nothing to do (the last crash came after the end's commit)", code, out, stderr)
	}
	db, err := bolt.Open(filepath.Join(dir, ".roombridge", "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	after := dumpKeys(t, db)
	recs, err := audit.List(context.Background(), db, audit.Query{}, 0)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, before, after, recs)
	checkRunsMigrated(t, dir)
}

// checkMigrated compares the store before and after the migration.
func checkMigrated(t *testing.T, before, after map[string]string, recs []audit.Record) {
	t.Helper()
	timers := 0
	for k, v := range before {
		switch {
		case strings.HasPrefix(k, "timers/dedupe/"):
			timers++
			if _, ok := after[k]; ok {
				t.Errorf("%s: still there", k)
			}
		case k == "seq/audit":
		case after[k] != v:
			t.Errorf("%s: %q, was %q", k, after[k], v)
		}
	}
	if after["meta/format"] != "2" {
		t.Errorf("format %q, want 2", after["meta/format"])
	}
	var migrated []audit.Record
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Errorf("audit record %d has seq %d", i+1, r.Seq)
		}
		if r.Action == migrate.Action {
			migrated = append(migrated, r)
		}
	}
	if len(migrated) != 1 || migrated[0].From != "format 1" || migrated[0].To != "format 2" || !strings.Contains(migrated[0].Detail, `"resumed":true`) ||
		!strings.Contains(migrated[0].Detail, fmt.Sprintf(`"dedupe_timers":%d`, timers)) {
		t.Fatalf("store_migrated records: %+v; want one, 1 -> 2, resumed, counting the %d timers of all its runs", migrated, timers)
	}
	t.Logf("migrated: %d keys before, %d after, %d dedupe timers dropped; %s", len(before), len(after), timers, migrated[0].Detail)
}

// checkRunsMigrated runs the bridge with no config on the migrated store.
func checkRunsMigrated(t *testing.T, dir string) {
	t.Helper()
	p := startBridge(t, dir, []string{"USER=alice"}, "run", "--http", "127.0.0.1:0")
	base, token := p.api(filepath.Join(dir, ".roombridge"))
	var list struct{ Requests []requests.Request }
	call(t, http.MethodGet, base+"/v1/requests", token, nil, &list)
	states := map[requests.State]int{}
	var waiting requests.ID
	for _, r := range list.Requests {
		states[r.State]++
		if r.State == requests.Pending {
			waiting = r.ID
		}
	}
	if len(list.Requests) != 7 || states[requests.Done] != 5 || states[requests.Cancelled] != 1 || states[requests.Pending] != 1 {
		t.Fatalf("requests on the migrated store: %v; want the fixture's 7: 5 done, 1 cancelled, 1 pending", states)
	}
	var r requests.Request
	code := call(t, http.MethodPost, base+"/v1/requests", token, map[string]string{"room": "console", "agent": "coder", "text": "echo from the api"}, &r)
	if code != http.StatusCreated {
		t.Fatalf("a new ask on the migrated store: HTTP %d", code)
	}
	replayed, id := replayKey(t, base, token, "key-1")
	if !replayed || !hasID(list.Requests, id) {
		t.Errorf("the fixture's Idempotency-Key key-1 again: replayed %v, %s; want the request it made then", replayed, id)
	}
	if _, _, code := runCLI(t, dir, "approve", waiting.String()); code != 0 {
		t.Fatalf("approve %s: exit %d", waiting, code)
	}
	p.waitLine(0, waiting.String()+` \| status: done`)
}

func hasID(rs []requests.Request, id requests.ID) bool {
	for _, r := range rs {
		if r.ID == id {
			return true
		}
	}
	return false
}

// replayKey asks the fixture's API ask again with its Idempotency-Key.
func replayKey(t *testing.T, base, token, key string) (bool, requests.ID) {
	t.Helper()
	body := strings.NewReader(`{"room":"console","agent":"coder","text":"echo from the api"}`)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/requests", body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r requests.Request
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.Header.Get("Idempotency-Replayed") == "true", r.ID
}

// cliCmd is the bridge CLI as a command to run in dir.
func cliCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(bridgeBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	return cmd
}
