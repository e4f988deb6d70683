package requests_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// queueState returns agent's stored queue count (-1: none) and the entries
// of its queue index.
func queueState(t *testing.T, f *fixture, agent string) (count, entries int) {
	t.Helper()
	count = -1
	err := f.db.View(context.Background(), func(tx store.Tx) error {
		b, err := tx.Get("agent_queue_len", owner+"/"+agent)
		switch {
		case err == nil:
			count = int(binary.BigEndian.Uint64(b))
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		p := owner + "/" + agent + "/"
		return tx.Scan("agent_queue", p, store.PrefixEnd(p), func(string, []byte) error { entries++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return count, entries
}

// TestQueueCountFollowsTheIndex: the queue limit is checked against a stored
// count, which follows the queue index through approvals, starts, cancels
// and a reassignment, and refuses a creation exactly at the limit.
func TestQueueCountFollowsTheIndex(t *testing.T) {
	f := newFixture(t)
	f.svc.SetQueueLimit(3)
	check := func(step, agent string, want int) {
		t.Helper()
		count, entries := queueState(t, f, agent)
		if count != want || entries != want {
			t.Fatalf("%s: %s's queue count %d, index entries %d; want %d", step, agent, count, entries, want)
		}
	}
	approved := ask("queued")
	approved.Approved = true
	a := f.create(t, approved)
	check("one approved", "coder", 1)
	p := f.create(t, ask("pending"))
	check("one pending", "coder", 1)
	f.apply(t, p.ID, requests.Approve)
	check("pending approved", "coder", 2)
	c := f.create(t, approved)
	check("third", "coder", 3)
	if _, err := f.svc.Create(context.Background(), approved); !errors.Is(err, requests.ErrQueueFull) {
		t.Fatalf("fourth create: %v, want ErrQueueFull", err)
	}
	check("refused", "coder", 3)
	f.apply(t, a.ID, requests.Start)
	check("one started", "coder", 2)
	f.apply(t, p.ID, requests.Cancel)
	check("one cancelled", "coder", 1)
	err := f.db.Update(context.Background(), func(tx store.Tx) error {
		_, err := f.svc.UpdateTx(tx, c.ID, ownerUser, "", "", func(r *requests.Request) { r.Agent = "reviewer" })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	check("reassigned away", "coder", 0)
	if count, entries := queueState(t, f, "reviewer"); count != -1 || entries != 1 {
		t.Fatalf("reviewer, never checked: count %d, entries %d; want none counted, 1 entry", count, entries)
	}
	toReviewer := approved
	toReviewer.Agent = "reviewer"
	f.create(t, toReviewer)
	check("reviewer counted at its first check", "reviewer", 2)
}

// TestQueueCountedAtTheFirstCheck: requests queued while no limit was set
// (no count stored, as in a store from before the count) are counted by the
// first check under a limit.
func TestQueueCountedAtTheFirstCheck(t *testing.T) {
	f := newFixture(t)
	approved := ask("queued")
	approved.Approved = true
	for range 3 {
		f.create(t, approved)
	}
	if count, entries := queueState(t, f, "coder"); count != -1 || entries != 3 {
		t.Fatalf("without a limit: count %d, entries %d; want none counted, 3 entries", count, entries)
	}
	f.svc.SetQueueLimit(3)
	if _, err := f.svc.Create(context.Background(), approved); !errors.Is(err, requests.ErrQueueFull) {
		t.Fatalf("create at the limit: %v, want ErrQueueFull", err)
	}
	f.svc.SetQueueLimit(4)
	f.create(t, approved)
	if count, entries := queueState(t, f, "coder"); count != 4 || entries != 4 {
		t.Fatalf("under a limit of 4: count %d, entries %d; want 4 and 4", count, entries)
	}
}

// TestQueueCountsResetAtTheTermStart: a count left stale (an older binary
// led without keeping it) refuses creations until ResetQueueCounts, which
// the leader runs at each term's start; then the next check counts the
// index afresh.
func TestQueueCountsResetAtTheTermStart(t *testing.T) {
	f := newFixture(t)
	f.svc.SetQueueLimit(3)
	approved := ask("queued")
	approved.Approved = true
	f.create(t, approved)
	err := f.db.Update(context.Background(), func(tx store.Tx) error {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], 3) // stale: the index has 1
		return tx.Put("agent_queue_len", owner+"/coder", b[:])
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Create(context.Background(), approved); !errors.Is(err, requests.ErrQueueFull) {
		t.Fatalf("create on a stale count: %v, want ErrQueueFull (the count is trusted)", err)
	}
	if err := f.svc.ResetQueueCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if count, entries := queueState(t, f, "coder"); count != -1 || entries != 1 {
		t.Fatalf("after the reset: count %d, entries %d; want none stored, 1 entry", count, entries)
	}
	f.create(t, approved)
	if count, entries := queueState(t, f, "coder"); count != 2 || entries != 2 {
		t.Fatalf("after the reset and a creation: count %d, entries %d; want 2 and 2", count, entries)
	}
}
