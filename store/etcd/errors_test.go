package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"go.etcd.io/etcd/server/v3/embed"
)

// TestOutageIsUnavailable: with etcd gone, a write and a read fail as
// store.ErrUnavailable (busy or unreachable: retry), never as fenced; once
// etcd is back the same store writes again.
func TestOutageIsUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s := open(t, cli, etcd.Options{Prefix: "/outage", Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	put := func(tx store.Tx) error { return tx.Put("b", "k", []byte("v")) }
	if err := s.Update(ctx, put); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	err := s.Update(ctx, put)
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrFenced) {
		t.Fatalf("write during the outage: %v; want store.ErrUnavailable", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = s.View(rctx, func(tx store.Tx) error { _, err := tx.Get("b", "k"); return err })
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("read during the outage: %v; want store.ErrUnavailable", err)
	}
	srv.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for err = s.Update(ctx, put); err != nil; err = s.Update(ctx, put) {
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("write after the outage: %v", err)
		}
	}
}

// TestKeepAliveWithinServerMinimum: the client pings no more often than
// the etcd server's default --grpc-keepalive-min-time permits (a client that
// pings more often is answered GOAWAY "too_many_pings" and dropped).
func TestKeepAliveWithinServerMinimum(t *testing.T) {
	for _, set := range []time.Duration{0, time.Second, 30 * time.Second} {
		got := etcd.ClientConfig(nil, etcd.ClientOptions{KeepAlive: set})
		if got.DialKeepAliveTime < embed.DefaultGRPCKeepAliveMinTime {
			t.Errorf("keepalive %v: the client pings every %v, under etcd's minimum %v", set, got.DialKeepAliveTime, embed.DefaultGRPCKeepAliveMinTime)
		}
		if got.PermitWithoutStream {
			t.Errorf("keepalive %v: the client pings without a stream, which etcd refuses", set)
		}
	}
	if got := etcd.ClientConfig(nil, etcd.ClientOptions{}).DialKeepAliveTime; got != etcd.DefaultKeepAlive {
		t.Errorf("default keepalive %v, want %v", got, etcd.DefaultKeepAlive)
	}
}
