package election_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// TestEligibilityRecheckedAfterWinning: an instance that was eligible when
// it began to campaign and waited in line behind the leader (an old binary
// queued before a new leader migrated the store) asks again once it wins:
// no longer eligible, it resigns without leading.
func TestEligibilityRecheckedAfterWinning(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startCandidate(t, srv, "a", 5*time.Second)
	if ev := a.next(t, 10*time.Second); !ev.start {
		t.Fatalf("a: %+v, want a term start", ev)
	}
	var moved atomic.Bool
	var asked atomic.Int32
	l, err := election.New(election.Options{Client: srv.Client(t), Prefix: electionPrefix, TTL: 5 * time.Second, Name: "b",
		Eligible: func(context.Context) error {
			asked.Add(1)
			if moved.Load() {
				return errors.New("the store is in format 3, newer than this binary knows")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	led, done := make(chan struct{}, 1), make(chan error, 1)
	go func() {
		done <- l.Run(ctx, func(ctx context.Context) error { led <- struct{}{}; <-ctx.Done(); return nil })
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "b to ask whether it may lead", func() bool { return asked.Load() >= 1 })

	moved.Store(true) // the leader migrates the store while b waits in line
	a.stop(t)
	deadline := time.After(10 * time.Second)
	for l.Ineligible() == "" {
		select {
		case <-led:
			t.Fatal("b led after the store moved on: it did not ask again once it won")
		case <-deadline:
			t.Fatalf("b did not find itself ineligible within 10s (asked %d times)", asked.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-led:
		t.Fatal("b led a store it may not lead")
	default:
	}
	waitFor(t, "b to resign", func() bool { v, err := l.Leader(context.Background()); return err == nil && v == "" })
	select {
	case <-led:
		t.Fatal("b led a store it may not lead")
	default:
	}
}

// waitFor waits until cond holds, at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
