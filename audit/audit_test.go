package audit_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func openDB(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func appendAll(t testing.TB, db store.Store, recs ...audit.Record) {
	t.Helper()
	err := db.Update(context.Background(), func(tx store.Tx) error {
		for _, r := range recs {
			if err := audit.Append(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func list(t testing.TB, db store.Store, q audit.Query) []audit.Record {
	t.Helper()
	recs, err := audit.List(context.Background(), db, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// details lists the Detail field of recs: tests use it as a record's name.
func details(recs []audit.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.Detail)
	}
	return out
}

func TestAppend(t *testing.T) {
	db := openDB(t)
	east := time.FixedZone("UTC+8", 8*3600)
	appendAll(t, db,
		audit.Record{Time: t0.In(east), RequestID: "R20261129-01", Actor: "slack:U1", Surface: "slack", Action: "create", To: "pending", Detail: "a"},
		audit.Record{Time: t0, Actor: "system:outbox", Action: "delivery_failed", Detail: "b", Seq: 999}, // Seq is assigned
	)
	recs := list(t, db, audit.Query{})
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	if recs[0].Seq != 1 || recs[1].Seq != 2 {
		t.Errorf("seqs %d %d, want 1 2", recs[0].Seq, recs[1].Seq)
	}
	if recs[0].Time.Location() != time.UTC || !recs[0].Time.Equal(t0) {
		t.Errorf("time %v, want %v in UTC", recs[0].Time, t0)
	}
	want := audit.Record{Seq: 1, Time: t0, RequestID: "R20261129-01", Actor: "slack:U1", Surface: "slack", Action: "create", To: "pending", Detail: "a"}
	if recs[0] != want {
		t.Errorf("record %+v\nwant %+v", recs[0], want)
	}
	if n, err := audit.Count(context.Background(), db); err != nil || n != 2 {
		t.Errorf("Count = %d, %v", n, err)
	}
	// A record without a request is not in any request's trail.
	if got := list(t, db, audit.Query{RequestID: "R20261129-01"}); len(got) != 1 {
		t.Errorf("by request: %v", details(got))
	}
	// A failed transaction appends nothing.
	_ = db.Update(context.Background(), func(tx store.Tx) error {
		_ = audit.Append(tx, audit.Record{Time: t0, Actor: "x", Action: "y"})
		return errors.New("rolled back")
	})
	if n, _ := audit.Count(context.Background(), db); n != 2 {
		t.Errorf("Count after rollback = %d", n)
	}
}

// fixture: records a0..a9 at t0+i s (odd ones of R…-01, even of R…-100),
// plus two in the same millisecond, appended out of time order.
func fixture(t testing.TB) *bolt.DB {
	db := openDB(t)
	var recs []audit.Record
	for _, i := range []int{5, 0, 9, 3, 1, 7, 2, 8, 6, 4} {
		id := "R20261129-100"
		if i%2 == 1 {
			id = "R20261129-01"
		}
		recs = append(recs, audit.Record{Time: t0.Add(time.Duration(i) * time.Second), RequestID: id, Actor: "t", Action: "x", Detail: fmt.Sprintf("a%d", i)})
	}
	recs = append(recs,
		audit.Record{Time: t0.Add(3 * time.Second), RequestID: "R20261129-10", Actor: "t", Action: "x", Detail: "b3"},
		audit.Record{Time: t0.Add(3*time.Second + 999*time.Microsecond), Actor: "t", Action: "x", Detail: "c3"},
	)
	appendAll(t, db, recs...)
	return db
}

func TestEachTimeRange(t *testing.T) {
	db := fixture(t)
	sec := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	for _, tc := range []struct {
		name string
		q    audit.Query
		want []string
	}{
		{"all", audit.Query{}, []string{"a0", "a1", "a2", "a3", "b3", "c3", "a4", "a5", "a6", "a7", "a8", "a9"}},
		{"since inclusive, until exclusive", audit.Query{Since: sec(3), Until: sec(7)}, []string{"a3", "b3", "c3", "a4", "a5", "a6"}},
		{"since only", audit.Query{Since: sec(8)}, []string{"a8", "a9"}},
		{"until only", audit.Query{Until: sec(2)}, []string{"a0", "a1"}},
		{"empty range", audit.Query{Since: sec(4), Until: sec(4)}, []string{}},
		{"inverted range", audit.Query{Since: sec(6), Until: sec(2)}, []string{}},
		{"after the end", audit.Query{Since: sec(60)}, []string{}},
		{"by request", audit.Query{RequestID: "R20261129-01"}, []string{"a1", "a3", "a5", "a7", "a9"}},
		{"by request: -10 is not a prefix of -100", audit.Query{RequestID: "R20261129-10"}, []string{"b3"}},
		{"by request and range", audit.Query{RequestID: "R20261129-100", Since: sec(2), Until: sec(8)}, []string{"a2", "a4", "a6"}},
		{"unknown request", audit.Query{RequestID: "R20261129-02"}, []string{}},
		// Bounds are exact times, not whole milliseconds.
		{"since mid-millisecond", audit.Query{Since: sec(3).Add(500 * time.Microsecond)}, []string{"c3", "a4", "a5", "a6", "a7", "a8", "a9"}},
		{"until mid-millisecond", audit.Query{Since: sec(3), Until: sec(3).Add(500 * time.Microsecond)}, []string{"a3", "b3"}},
		{"until just after", audit.Query{Since: sec(3), Until: sec(3).Add(999*time.Microsecond + 1)}, []string{"a3", "b3", "c3"}},
		{"by request, until mid-millisecond", audit.Query{RequestID: "R20261129-01", Until: sec(1).Add(time.Nanosecond)}, []string{"a1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := details(list(t, db, tc.q))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			// Each agrees with List, in time order.
			var prev time.Time
			err := audit.Each(context.Background(), db, tc.q, func(r *audit.Record) error {
				if r.Time.Before(prev) {
					return fmt.Errorf("out of order: %v after %v", r.Time, prev)
				}
				prev = r.Time
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
}

func TestEachStopAndErrors(t *testing.T) {
	db := fixture(t)
	ctx := context.Background()
	n := 0
	err := audit.Each(ctx, db, audit.Query{}, func(*audit.Record) error {
		n++
		if n == 3 {
			return store.ErrStop
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("stop after 3: n=%d, %v", n, err)
	}
	boom := errors.New("boom")
	if err := audit.Each(ctx, db, audit.Query{}, func(*audit.Record) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("callback error: %v", err)
	}
	if recs, err := audit.List(ctx, db, audit.Query{}, 4); err != nil || len(recs) != 4 || recs[3].Detail != "a3" {
		t.Errorf("List limit 4: %v, %v", details(recs), err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := audit.List(cctx, db, audit.Query{}, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	// List copies: records stay distinct after the walk.
	recs := list(t, db, audit.Query{})
	if recs[0].Detail == recs[1].Detail {
		t.Error("List returned aliased records")
	}
}

// TestEachCancelMidway: a long walk notices a cancelled context.
func TestEachCancelMidway(t *testing.T) {
	db := openDB(t)
	recs := make([]audit.Record, 10000)
	for i := range recs {
		recs[i] = audit.Record{Time: t0.Add(time.Duration(i) * time.Millisecond), Actor: "t", Action: "x"}
	}
	appendAll(t, db, recs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	err := audit.Each(ctx, db, audit.Query{}, func(*audit.Record) error {
		n++
		if n == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n >= len(recs) {
		t.Errorf("walk after cancel: n=%d, %v", n, err)
	}
}
