package audit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
)

// TestTail: Tail reads each appended record once, whatever its time: records
// appended before the cursor are never read, a record whose time is far
// before the others (a clock that went back) is found, and a pruned record
// is simply missed.
func TestTail(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	appendAll(t, db, audit.Record{Time: t0, Action: "before"})
	c, err := audit.End(ctx, db, t0)
	if err != nil {
		t.Fatal(err)
	}
	read := func() []string {
		t.Helper()
		var got []string
		next, err := audit.Tail(ctx, db, c, func(r *audit.Record) error {
			got = append(got, r.Action)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c = next
		slices.Sort(got)
		return got
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("nothing appended, Tail read %v", got)
	}
	appendAll(t, db, audit.Record{Time: t0.Add(time.Second), Action: "a"}, audit.Record{Time: t0.Add(2 * time.Second), Action: "b"})
	if got := read(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Tail read %v, want [a b]", got)
	}
	if !c.Time.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("cursor time %v", c.Time)
	}
	// Appended later, but dated an hour before the latest record read.
	appendAll(t, db, audit.Record{Time: t0.Add(-time.Hour), Action: "old"}, audit.Record{Time: t0.Add(3 * time.Second), Action: "c"})
	if got := read(); !slices.Equal(got, []string{"c", "old"}) {
		t.Fatalf("Tail read %v, want [c old]", got)
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("read again: %v", got)
	}
	// Pruned before it was read: missed, and the cursor still moves on.
	appendAll(t, db, audit.Record{Time: t0.Add(-2 * time.Hour), Action: "pruned"}, audit.Record{Time: t0.Add(4 * time.Second), Action: "d"})
	if _, err := audit.Prune(ctx, db, t0.Add(-90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := read(); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("Tail read %v, want [d]", got)
	}
	appendAll(t, db, audit.Record{Time: t0.Add(5 * time.Second), Action: "e"})
	if got := read(); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("Tail read %v, want [e]", got)
	}
}
