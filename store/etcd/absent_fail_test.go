package etcd_test

import (
	"context"
	"errors"
	"testing"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// An Update that fails after a guessed-missing read is run again with the
// key read from etcd: an idempotent API retry (or a redelivered reply)
// whose key is in etcd is replayed, not refused (it was refused before: the
// failed call's guess was never compared).
func TestGuessedMissingReadAgainWhenTheCallFails(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s := open(t, cli, etcd.Options{Prefix: "/ab", Absent: []string{"seen"}})
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/ab/seen/k", "R1"); err != nil { // written by an earlier process
		t.Fatal(err)
	}
	errQueueFull := errors.New("queue full")
	err := s.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.Get("seen", "k"); err == nil {
			return nil // replay: the key is there
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return errQueueFull // the creation is refused
	})
	if err != nil {
		t.Fatalf("Update = %v; the key is in etcd, the call should have replayed", err)
	}
}
