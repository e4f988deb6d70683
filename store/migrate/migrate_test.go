package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"github.com/roombridge/roombridge/store/migrate"
)

// backends opens an empty store of each kind.
func backends(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"bolt": func(t *testing.T) store.Store {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db
		},
		"etcd": func(t *testing.T) store.Store {
			srv := etcdtest.Start(t)
			s, err := etcd.New(srv.Client(t), etcd.Options{Prefix: "/m"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		// As the HA leader migrates: every Txn fenced by the election
		// key, so one more read (the key's revision) and one op fewer.
		"etcd-fenced": func(t *testing.T) store.Store {
			srv := etcdtest.Start(t)
			cli := srv.Client(t)
			put, err := cli.Put(context.Background(), "/election/a", "")
			if err != nil {
				t.Fatal(err)
			}
			s, err := etcd.New(cli, etcd.Options{Prefix: "/m", Fence: keyFence{"/election/a", put.Header.Revision}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

// keyFence is the fence of a term whose election key was created at rev.
type keyFence struct {
	key string
	rev int64
}

func (f keyFence) Term() (string, int64, bool) { return f.key, f.rev, true }
func (f keyFence) Unsure() bool                { return false }
func (f keyFence) Lost(string, int64)          {}

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// writeFormat1 writes n dedupe keys as format 1 did: the key, and its timer
// in the expiry index (the format 1 Remember, verbatim), and another
// timer kind the step must leave alone.
func writeFormat1(t *testing.T, st store.Store, n int) {
	for i := 0; i < n; i += 50 {
		err := st.Update(context.Background(), func(tx store.Tx) error {
			for j := i; j < min(i+50, n); j++ {
				exp := t0.Add(time.Duration(j) * time.Minute)
				if err := store.Remember(tx, fmt.Sprintf("ask:e%05d", j), nil, t0, exp.Sub(t0)); err != nil {
					return err
				}
				if err := store.AddTimer(tx, "dedupe", exp, fmt.Sprintf("ask:e%05d", j)); err != nil {
					return err
				}
			}
			return store.AddTimer(tx, "approval", t0, fmt.Sprintf("A%d", i))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func count(t *testing.T, st store.Store, bucket, prefix string) int {
	n := 0
	err := st.View(context.Background(), func(tx store.Tx) error {
		return tx.Scan(bucket, prefix, store.PrefixEnd(prefix), func(string, []byte) error { n++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func format(t *testing.T, st store.Store) int {
	f, err := migrate.Check(context.Background(), st, 99)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRun(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// An empty store is stamped.
			empty := open(t)
			res, err := migrate.Run(ctx, empty, migrate.Options{Known: 2, Steps: []migrate.Step{migrate.LeanDedupe}})
			if err != nil || !res.Created || format(t, empty) != 2 {
				t.Fatalf("Run on an empty store: %+v, %v, format %d; want stamped with 2", res, err, format(t, empty))
			}

			st := open(t)
			writeFormat1(t, st, 300)
			opts := migrate.Options{Known: 2, Steps: []migrate.Step{migrate.LeanDedupe}, Now: func() time.Time { return t0 }}
			// Dry: says what would change, changes nothing.
			dry := opts
			dry.DryRun = true
			res, err = migrate.Run(ctx, st, dry)
			if err != nil || len(res.Steps) != 1 || res.Steps[0].Counts["dedupe_timers"] != 300 || res.To != 1 {
				t.Fatalf("dry run: %+v, %v; want one step of 300 dedupe timers, format still 1", res, err)
			}
			if n := count(t, st, "timers", "dedupe/"); n != 300 || format(t, st) != 1 {
				t.Fatalf("dry run changed the store: %d timers, format %d", n, format(t, st))
			}
			// An earlier run was cut off: the mark is there.
			if err := st.Update(ctx, func(tx store.Tx) error { return tx.Put(store.MetaBucket, migrate.MigratingKey, []byte("2")) }); err != nil {
				t.Fatal(err)
			}
			res, err = migrate.Run(ctx, st, opts)
			if err != nil || res.From != 1 || res.To != 2 || !res.Steps[0].Resumed {
				t.Fatalf("Run: %+v, %v; want 1 -> 2, resumed", res, err)
			}
			if n := count(t, st, "timers", "dedupe/"); n != 0 {
				t.Errorf("%d dedupe timers left", n)
			}
			if n := count(t, st, "timers", "approval/"); n != 6 {
				t.Errorf("%d approval timers, want 6 untouched", n)
			}
			if n := count(t, st, store.BucketDedupe, ""); n != 300 {
				t.Errorf("%d dedupe keys, want 300 kept", n)
			}
			recs, err := audit.List(ctx, st, audit.Query{}, 0)
			if err != nil || len(recs) != 1 || recs[0].Action != migrate.Action || recs[0].From != "format 1" || recs[0].To != "format 2" ||
				!strings.Contains(recs[0].Detail, `"dedupe_timers":300`) || !strings.Contains(recs[0].Detail, `"resumed":true`) {
				t.Fatalf("audit: %+v, %v; want one store_migrated 1 -> 2 with its counts", recs, err)
			}
			// Again: nothing to do, nothing audited twice.
			res, err = migrate.Run(ctx, st, opts)
			if err != nil || len(res.Steps) != 0 || res.To != 2 {
				t.Errorf("second Run: %+v, %v; want nothing to do", res, err)
			}
			if recs, _ := audit.List(ctx, st, audit.Query{}, 0); len(recs) != 1 {
				t.Errorf("%d audit records after a second run, want 1", len(recs))
			}
			// Expired keys still go (the new purge reads the keys).
			var purged int
			for after := ""; ; {
				var n int
				err := st.Update(ctx, func(tx store.Tx) error {
					var err error
					n, after, err = store.PurgeDedupe(tx, t0.Add(100*time.Minute), after, 7)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				if purged += n; after == "" {
					break
				}
			}
			if purged != 101 || count(t, st, store.BucketDedupe, "") != 199 {
				t.Errorf("purged %d, want the 101 expired (0 to 100 minutes) (keys left: %d)", purged, count(t, st, store.BucketDedupe, ""))
			}
		})
	}
}

// TestNewerFormatRefused: a store newer than the binary is refused, by
// Check and by Run, naming both formats, and nothing is written.
func TestNewerFormatRefused(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			if err := st.Update(context.Background(), func(tx store.Tx) error { return store.WriteFormat(tx, 3) }); err != nil {
				t.Fatal(err)
			}
			_, err := migrate.Run(context.Background(), st, migrate.Options{Known: 2, Steps: []migrate.Step{migrate.LeanDedupe}})
			var fe *store.FormatError
			if !errors.As(err, &fe) || fe.Store != 3 || fe.Known != 2 ||
				!strings.Contains(err.Error(), "format 3, newer than this binary knows (format 2)") {
				t.Fatalf("Run on a newer store: %v", err)
			}
			if n := count(t, st, store.MetaBucket, migrate.MigratingKey); n != 0 {
				t.Errorf("Run on a newer store wrote its mark")
			}
		})
	}
}
