package audit_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

func TestPrune(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	base := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	if err := s.Update(ctx, func(tx store.Tx) error {
		for i := 0; i < 120; i++ {
			if err := audit.Append(tx, audit.Record{Time: base.Add(time.Duration(i) * time.Hour), RequestID: "R20260801-01", Actor: "test", Action: "note"}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n, err := audit.Prune(ctx, s, base.Add(110*time.Hour))
	if err != nil || n != 110 {
		t.Fatalf("Prune = %d, %v; want 110", n, err)
	}
	for _, q := range []audit.Query{{}, {RequestID: "R20260801-01"}} {
		left, err := audit.List(ctx, s, q, 0)
		if err != nil || len(left) != 10 || !left[0].Time.Equal(base.Add(110*time.Hour)) {
			t.Errorf("query %+v after prune: %d records (%v); want the 10 from +110h on", q, len(left), err)
		}
	}
}
