package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// A claim whose answer comes back later than fresh is made again, and
// after claimTries late answers it fails as unavailable (the delivery is
// retried later), never as a success: an answer used late may be a term
// that has ended. The fence itself is TestHAPausedLeader's.
func TestClaimAnsweredLateIsMadeAgain(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	late := elected{store: db, fresh: time.Nanosecond} // every answer is late
	if err := late.Claim(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("claim with every answer late: %v, want store.ErrUnavailable", err)
	}
	if err := (elected{store: db, fresh: time.Hour}).Claim(ctx); err != nil {
		t.Errorf("claim answered in time: %v", err)
	}
	db.Close()
	if err := (elected{store: db, fresh: time.Hour}).Claim(ctx); err == nil {
		t.Error("a claim on a closed store succeeded")
	}
}
