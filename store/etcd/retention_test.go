package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// TestAuditPrune: pruning the audit log on etcd deletes exactly the records
// older than the bound and their request index entries, in transactions that
// respect etcd's operation limit, and leaves the newer ones queryable.
func TestAuditPrune(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv.Client(t), etcd.Options{Prefix: "/prune"})
	ctx := context.Background()
	base := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	const old, fresh = 130, 5 // more old records than one Txn may delete
	for i := 0; i < old+fresh; i++ {
		at := base.Add(time.Duration(i) * time.Minute)
		if i >= old {
			at = base.Add(100 * 24 * time.Hour)
		}
		if err := s.Update(ctx, func(tx store.Tx) error {
			return audit.Append(tx, audit.Record{Time: at, RequestID: fmt.Sprintf("R20260801-%02d", i%7), Actor: "test", Action: "create"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := audit.Prune(ctx, s, base.Add(90*24*time.Hour))
	if err != nil || n != old {
		t.Fatalf("Prune = %d, %v; want %d", n, err, old)
	}
	left, err := audit.List(ctx, s, audit.Query{}, 0)
	if err != nil || len(left) != fresh {
		t.Fatalf("after prune %d records (%v), want %d", len(left), err, fresh)
	}
	for i := 0; i < 7; i++ {
		id := fmt.Sprintf("R20260801-%02d", i)
		byReq, err := audit.List(ctx, s, audit.Query{RequestID: id}, 0)
		if err != nil {
			t.Fatalf("query %s: %v (a dangling index entry?)", id, err)
		}
		for _, r := range byReq {
			if r.Time.Before(base.Add(90 * 24 * time.Hour)) {
				t.Errorf("%s: pruned record still listed: %+v", id, r)
			}
		}
	}
	if n, err := audit.Prune(ctx, s, base.Add(90*24*time.Hour)); n != 0 || err != nil {
		t.Errorf("second Prune = %d, %v; want 0", n, err)
	}
}
