package migrate_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/migrate"
)

// fixture is a store written by the format 1 binary
// (testdata/stores/format1/generate.sh says how).
const fixture = "../../testdata/stores/format1/bridge.db"

func dump(t *testing.T, st store.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := st.(store.Dumper).Dump(context.Background(), func(b, k string, v []byte) error {
		out[b+"/"+k] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// fixtureStores returns the fixture opened as a bolt file and restored into
// an etcd prefix (through a backup).
func fixtureStores(t *testing.T) map[string]store.Store {
	raw, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bridge.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var buf bytes.Buffer
	if _, err := store.Backup(context.Background(), db, time.Now(), &buf); err != nil {
		t.Fatal(err)
	}
	et := backends(t)["etcd"](t)
	if _, err := store.Restore(context.Background(), et, bytes.NewReader(buf.Bytes()), store.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	return map[string]store.Store{"bolt": db, "etcd": et}
}

// TestMigrateFormat1Fixture: the store of the format 1 binary is migrated
// on both backends; every key is still there byte for byte, but for the
// dedupe timers the step deletes and what the migration itself writes (the
// format, its audit record and the audit sequence).
func TestMigrateFormat1Fixture(t *testing.T) {
	for name, st := range fixtureStores(t) {
		t.Run(name, func(t *testing.T) {
			before := dump(t, st)
			if f := format(t, st); f != store.UnversionedFormat {
				t.Fatalf("fixture's format: %d, want %d", f, store.UnversionedFormat)
			}
			timers := 0
			for k := range before {
				if strings.HasPrefix(k, "timers/dedupe/") {
					timers++
				}
			}
			if timers == 0 || len(before) < 50 {
				t.Fatalf("the fixture holds %d keys, %d dedupe timers: not the store generate.sh writes", len(before), timers)
			}
			res, err := migrate.Run(context.Background(), st, migrate.Options{Known: 2, Steps: []migrate.Step{migrate.LeanDedupe}})
			if err != nil || res.To != 2 || res.Steps[0].Counts["dedupe_timers"] != timers {
				t.Fatalf("Run: %+v, %v; want format 2 after deleting %d dedupe timers", res, err, timers)
			}
			after := dump(t, st)
			for k, v := range before {
				switch {
				case strings.HasPrefix(k, "timers/dedupe/"):
					if _, ok := after[k]; ok {
						t.Errorf("%s: still there", k)
					}
				case k == store.BucketSeq+"/audit", k == "meta/format": // a restore records format 1
				case after[k] != v:
					t.Errorf("%s: changed: %q, was %q", k, after[k], v)
				}
			}
			var added []string
			for k := range after {
				if _, ok := before[k]; !ok && k != "meta/format" {
					added = append(added, k)
				}
			}
			if len(added) != 1 || !strings.HasPrefix(added[0], "audit/") || after["meta/format"] != "2" {
				t.Errorf("added %v, want meta/format = 2 and one audit record", added)
			}
			recs, err := audit.List(context.Background(), st, audit.Query{}, 0)
			if err != nil || recs[len(recs)-1].Action != migrate.Action || recs[len(recs)-1].Seq != recs[len(recs)-2].Seq+1 {
				t.Errorf("the audit log's last records: %+v, %v; want store_migrated next in the sequence", recs[len(recs)-2:], err)
			}
		})
	}
}
