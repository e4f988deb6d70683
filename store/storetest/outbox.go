package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
)

func testSequences(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	for want := uint64(1); want <= 3; want++ {
		update(t, s, func(tx store.Tx) error {
			n, err := store.NextSeq(tx, "x")
			if err != nil {
				return err
			}
			if n != want {
				t.Errorf("NextSeq = %d, want %d", n, want)
			}
			return nil
		})
	}
	// Within one transaction, each number follows the last, which Seq
	// tells (the bolt store holds them until the commit).
	update(t, s, func(tx store.Tx) error {
		for want := uint64(1); want <= 3; want++ {
			if n, err := store.NextSeq(tx, "z"); err != nil || n != want {
				t.Errorf("NextSeq in one transaction = %d, %v, want %d", n, err, want)
			}
			if n, err := store.Seq(tx, "z"); err != nil || n != want {
				t.Errorf("Seq after NextSeq in one transaction = %d, %v, want %d", n, err, want)
			}
		}
		// A scan of the counters' bucket sees them too.
		var seen []string
		if err := tx.Scan(store.BucketSeq, "z", "z\x00", func(k string, v []byte) error {
			seen = append(seen, fmt.Sprintf("%s=%x", k, v))
			return nil
		}); err != nil || len(seen) != 1 || seen[0] != "z=0000000000000003" {
			t.Errorf("scan of the counters in the transaction: %v, %v", seen, err)
		}
		if n, err := store.NextSeq(tx, "z"); err != nil || n != 4 {
			t.Errorf("NextSeq after the scan = %d, %v, want 4", n, err)
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		if n, _ := store.Seq(tx, "z"); n != 4 {
			t.Errorf("Seq after the commit = %d, want 4", n)
		}
		if n, _ := store.Seq(tx, "x"); n != 3 {
			t.Errorf("Seq = %d, want 3", n)
		}
		if n, _ := store.Seq(tx, "y"); n != 0 {
			t.Errorf("Seq of unused counter = %d, want 0", n)
		}
		return nil
	})
}

// Concurrent numbers share commits, some of whose calls fail: the calls
// that committed hold every number from 1 to the counter once each, and a
// failed call's numbers are given to none.
func testSequencesShareCommits(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	const n = 64
	boom := errors.New("boom")
	got := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := s.Update(context.Background(), func(tx store.Tx) error {
				a, err := store.NextSeq(tx, "shared")
				if err != nil {
					return err
				}
				if _, err := store.NextSeq(tx, "other"); err != nil {
					return err
				}
				if i%3 == 0 {
					return boom
				}
				got[i] = a
				return tx.Put("seqs", fmt.Sprintf("%03d", i), nil)
			})
			if err != nil && !errors.Is(err, boom) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i, a := range got {
		if i%3 != 0 && (a == 0 || seen[a]) {
			t.Fatalf("call %d got number %d (numbers so far %v)", i, a, seen)
		}
		seen[a] = true
	}
	view(t, s, func(tx store.Tx) error {
		for _, name := range []string{"shared", "other"} {
			if last, _ := store.Seq(tx, name); last != uint64(n-(n+2)/3) {
				t.Errorf("counter %s = %d, want %d: one a committed call", name, last, n-(n+2)/3)
			}
		}
		return nil
	})
	for a := uint64(1); a <= uint64(n-(n+2)/3); a++ {
		if !seen[a] {
			t.Errorf("number %d given to no committed call", a)
		}
	}
}

func testOutbox(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	ch, cancel := s.Subscribe(store.TopicOutbox)
	defer cancel()
	add := func(queue, coalesce, payload string) {
		update(t, s, func(tx store.Tx) error {
			return store.Enqueue(tx, &store.Effect{Queue: queue, Coalesce: coalesce, Payload: []byte(`"` + payload + `"`)})
		})
	}
	add("R1", "", "post")
	waitSignal(t, ch)
	add("R1", "R1/status", "status1")
	add("R2", "", "other")
	add("R1", "R1/status", "status2")
	var pending []store.Effect
	view(t, s, func(tx store.Tx) error {
		var err error
		pending, err = store.PendingEffects(tx, 0)
		return err
	})
	var got []string
	for _, e := range pending {
		got = append(got, string(e.Payload))
	}
	if fmt.Sprint(got) != `["post" "other" "status2"]` {
		t.Fatalf("pending = %v, want post, other, status2 (status1 coalesced away)", got)
	}
	update(t, s, func(tx store.Tx) error {
		e := pending[0]
		e.Attempts = 2
		return store.UpdateEffect(tx, e)
	})
	update(t, s, func(tx store.Tx) error {
		e, err := store.GetEffect(tx, pending[0].Seq)
		if err != nil || e.Attempts != 2 {
			t.Errorf("GetEffect = %+v, %v", e, err)
		}
		if err := store.AckEffect(tx, pending[2]); err != nil {
			return err
		}
		return store.AckEffect(tx, pending[0])
	})
	add("R1", "R1/status", "status3")
	view(t, s, func(tx store.Tx) error {
		rest, err := store.PendingEffects(tx, 0)
		if err != nil {
			return err
		}
		if len(rest) != 2 || string(rest[0].Payload) != `"other"` || string(rest[1].Payload) != `"status3"` {
			t.Errorf("after ack, pending = %v", rest)
		}
		if rest[1].Seq <= pending[2].Seq {
			t.Errorf("sequence not increasing: %d after %d", rest[1].Seq, pending[2].Seq)
		}
		return nil
	})
}

// An effect that stands for others (a Span) is expanded in its place: the
// effects enqueued after it stay after its parts, whose coalesce keys drop
// older effects and yield to newer ones.
func testOutboxExpand(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	created := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	e := enqueueAroundSpan(t, s, created)
	seq := e.Seq
	parts := []store.Effect{
		{Queue: "R1", Coalesce: "card", Payload: []byte(`"card2"`)},     // drops card1
		{Queue: "R1", Payload: []byte(`"outcome"`)},                     //
		{Queue: "R1", Coalesce: "parent", Payload: []byte(`"parent1"`)}, // parent2 came after: it wins
	}
	checkExpandRefused(t, s, seq, parts)
	update(t, s, func(tx store.Tx) error {
		return store.ExpandEffect(tx, store.Effect{Seq: e.Seq, Queue: "elsewhere"}, parts) // its own queue and time, as stored
	})
	want := `R1:"card2" R1:"outcome" R2:"other" R1:"parent2" R1:"after"`
	if got := pendingPayloads(t, s); got != want {
		t.Fatalf("after the expansion, pending = %s\nwant %s", got, want)
	}
	view(t, s, func(tx store.Tx) error {
		p, err := store.GetEffect(tx, seq+1)
		if err != nil || string(p.Payload) != `"outcome"` || !p.Created.Equal(created) || p.Span != 0 {
			t.Errorf("part 2 = %+v, %v: want it under seq+1, created when the effect was", p, err)
		}
		return nil
	})
	checkExpandedOnce(t, s, e, parts)
	// The coalesce key now names card2: a newer card drops it.
	enqueueEffect(t, s, store.Effect{Queue: "R1", Coalesce: "card", Payload: []byte(`"card3"`)})
	if got := pendingPayloads(t, s); strings.Contains(got, "card2") || !strings.Contains(got, "card3") {
		t.Fatalf("pending = %s: card3 should have replaced card2", got)
	}
}

// enqueueEffect enqueues e in s and returns its sequence number.
func enqueueEffect(t *testing.T, s store.Store, e store.Effect) uint64 {
	t.Helper()
	update(t, s, func(tx store.Tx) error { return store.Enqueue(tx, &e) })
	return e.Seq
}

// pendingPayloads lists s's pending effects as "queue:payload", in order.
func pendingPayloads(t *testing.T, s store.Store) string {
	t.Helper()
	var got []string
	view(t, s, func(tx store.Tx) error {
		pending, err := store.PendingEffects(tx, 0)
		for _, e := range pending {
			got = append(got, e.Queue+":"+string(e.Payload))
		}
		return err
	})
	return strings.Join(got, " ")
}

// enqueueAroundSpan enqueues an effect with a span of 4 (created at
// created) between others on R1 and R2, checks that the span reserved its
// sequence numbers and was stored, and returns the stored effect.
func enqueueAroundSpan(t *testing.T, s store.Store, created time.Time) store.Effect {
	t.Helper()
	enqueueEffect(t, s, store.Effect{Queue: "R1", Coalesce: "card", Payload: []byte(`"card1"`)})
	seq := enqueueEffect(t, s, store.Effect{Queue: "R1", Payload: []byte(`"three"`), Span: 4, Created: created})
	enqueueEffect(t, s, store.Effect{Queue: "R2", Payload: []byte(`"other"`)})
	enqueueEffect(t, s, store.Effect{Queue: "R1", Coalesce: "parent", Payload: []byte(`"parent2"`)})
	next := enqueueEffect(t, s, store.Effect{Queue: "R1", Payload: []byte(`"after"`)})
	if next != seq+4+2 {
		t.Fatalf("seq after a span of 4 = %d, want %d (the span reserved)", next, seq+6)
	}
	var e store.Effect
	view(t, s, func(tx store.Tx) error {
		var err error
		e, err = store.GetEffect(tx, seq)
		return err
	})
	if e.Span != 4 || !e.Created.Equal(created) {
		t.Fatalf("stored effect = %+v, want its span and creation time", e)
	}
	return e
}

// checkExpandRefused: more parts than the stored span of seq, or a negative
// span, are refused and leave the outbox as it was.
func checkExpandRefused(t *testing.T, s store.Store, seq uint64, parts []store.Effect) {
	t.Helper()
	// The stored span bounds the parts, whatever the caller says it is.
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		return store.ExpandEffect(tx, store.Effect{Seq: seq, Span: 9, Queue: "other"}, append(parts, parts...))
	}); err == nil {
		t.Fatal("6 effects expanded in a span of 4")
	}
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		return store.Enqueue(tx, &store.Effect{Queue: "R1", Span: -1})
	}); err == nil {
		t.Fatal("a negative span enqueued")
	}
	if got := pendingPayloads(t, s); !strings.Contains(got, `R1:"three"`) {
		t.Fatalf("a refused expansion changed the outbox: %s", got)
	}
}

// checkExpandedOnce: e, expanded, cannot be expanded again, nor can an
// effect delivered (acknowledged) before its expansion.
func checkExpandedOnce(t *testing.T, s store.Store, e store.Effect, parts []store.Effect) {
	t.Helper()
	update(t, s, func(tx store.Tx) error {
		if err := store.ExpandEffect(tx, e, parts); !errors.Is(err, store.ErrExpanded) {
			t.Errorf("expanding it again = %v, want ErrExpanded", err)
		}
		return nil
	})
	// An effect delivered (acknowledged) before its expansion is gone.
	gone := enqueueEffect(t, s, store.Effect{Queue: "R3", Payload: []byte(`"gone"`), Span: 2})
	update(t, s, func(tx store.Tx) error { return store.AckEffect(tx, store.Effect{Seq: gone}) })
	update(t, s, func(tx store.Tx) error {
		if err := store.ExpandEffect(tx, store.Effect{Seq: gone, Span: 2, Queue: "R3"}, parts[:1]); !errors.Is(err, store.ErrExpanded) {
			t.Errorf("expanding a delivered effect = %v, want ErrExpanded", err)
		}
		return nil
	})
}
