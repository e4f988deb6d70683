package threads_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// expandFixture ends a request without telling the threads observer, with
// one OpExpand effect standing for its ending in its thread (as the
// sweeper expires), and a reply queued in the thread after it.
func expandFixture(t *testing.T, fail func() error) (*fixture, *requests.Request) {
	t.Helper()
	f := newFixture(t)
	ctx := context.Background()
	r := f.create(t)
	f.th.SetExpander("test", func(tx store.Tx, e threads.Effect) ([]threads.Prepared, error) {
		if err := fail(); err != nil {
			return nil, err
		}
		got, err := f.svc.GetTx(tx, r.ID)
		if err != nil {
			return nil, err
		}
		return f.th.EndedTx(tx, got, e.Surface)
	})
	err := f.db.Update(ctx, func(tx store.Tx) error {
		ended, err := f.svc.ApplyTx(tx, r.ID, requests.Change{Event: requests.Cancel, Actor: "t",
			Skip: []string{threads.ObserverName}, Mutate: func(r *requests.Request) { r.Reason = "by test" }})
		if err != nil {
			return err
		}
		p, err := threads.PrepareExpand("test", "ref", ended.ID.String(), chat.Console, threads.EndedEffects)
		if err != nil {
			return err
		}
		if err := p.EnqueueTx(tx); err != nil {
			return err
		}
		return f.th.Reply(tx, ended, chat.Message{Text: "later"})
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, r
}

// flush delivers until the outbox is empty or nothing more goes out.
func (f *fixture) flush(t *testing.T) {
	t.Helper()
	for i := 0; i < 10 && f.pending(t) > 0; i++ {
		if _, err := f.d.DeliverOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(2 * time.Minute)
	}
}

// The outbox renders an OpExpand effect when it reaches it, in its place:
// its effects go out before those queued after it, once each.
func TestExpandInPlace(t *testing.T) {
	calls := 0
	f, r := expandFixture(t, func() error { calls++; return nil })
	f.d.Expand = f.th.ExpandTx
	f.flush(t)
	id := r.ID.String()
	want := fmt.Sprint([]string{"thread " + id, "reply " + id + " cancelled: by test", "update " + id + "/p cancelled: by test", "reply " + id + " later"})
	if got := fmt.Sprint(f.p.Calls()); got != want || f.pending(t) != 0 {
		t.Fatalf("delivered %s\nwant      %s (%d left)", got, want, f.pending(t))
	}
	if calls != 1 {
		t.Fatalf("expanded %d times, want once", calls)
	}
}

// An expansion that fails is retried with back-off, each failure audited,
// and nothing behind it in its thread goes out before it; one that can
// never render (a permanent error) is dropped and audited; a deliverer
// without an expander leaves the effect, and its thread, waiting.
func TestExpandFailures(t *testing.T) {
	t.Run("transient", func(t *testing.T) {
		fails := 1
		f, r := expandFixture(t, func() error {
			if fails > 0 {
				fails--
				return errors.New("store hiccup")
			}
			return nil
		})
		f.d.Expand = f.th.ExpandTx
		if _, err := f.d.DeliverOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(f.p.Calls()); got != "[thread "+r.ID.String()+"]" {
			t.Fatalf("after a failed expansion, delivered %s: only the parent", got)
		}
		f.flush(t)
		if n := len(f.p.Calls()); n != 4 || f.pending(t) != 0 {
			t.Fatalf("after the retry: %v, %d left", f.p.Calls(), f.pending(t))
		}
		if n := f.audited(t, "delivery_failed"); n != 1 {
			t.Fatalf("%d delivery_failed records, want 1", n)
		}
	})
	t.Run("a read that found nothing", func(t *testing.T) {
		// Not "expanded already": the expander's own not-found is retried
		// with back-off like any failure, never at once in a loop.
		calls := 0
		f, r := expandFixture(t, func() error { calls++; return fmt.Errorf("lookup: %w", store.ErrNotFound) })
		f.d.Expand = f.th.ExpandTx
		for range 3 {
			if _, err := f.d.DeliverOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if calls != 1 || f.audited(t, "delivery_failed") != 1 || fmt.Sprint(f.p.Calls()) != "[thread "+r.ID.String()+"]" {
			t.Fatalf("%d expansions, %d failures audited, delivered %v: want one, backed off, audited once", calls, f.audited(t, "delivery_failed"), f.p.Calls())
		}
	})
	t.Run("permanent", func(t *testing.T) {
		f, r := expandFixture(t, func() error { return fmt.Errorf("%w: gone", chat.ErrPermanent) })
		f.d.Expand = f.th.ExpandTx
		f.flush(t)
		id := r.ID.String()
		if got := fmt.Sprint(f.p.Calls()); got != "[thread "+id+" reply "+id+" later]" || f.pending(t) != 0 {
			t.Fatalf("delivered %s, %d left: want the expansion dropped, the rest delivered", got, f.pending(t))
		}
		if n := f.audited(t, "delivery_dropped"); n != 1 {
			t.Fatalf("%d delivery_dropped records, want 1", n)
		}
	})
	t.Run("no span", func(t *testing.T) {
		// An expand effect that reserved no place for its parts (not made
		// by PrepareExpand) can never be expanded in place: dropped.
		f, r := expandFixture(t, func() error { return nil })
		f.d.Expand = f.th.ExpandTx
		if err := f.db.Update(context.Background(), func(tx store.Tx) error {
			return store.Enqueue(tx, &store.Effect{Queue: "console/" + r.ID.String(),
				Payload: []byte(`{"op":"expand","request":"` + r.ID.String() + `","surface":"console","expand":"test","message":{}}`)})
		}); err != nil {
			t.Fatal(err)
		}
		f.flush(t)
		if f.pending(t) != 0 || f.audited(t, "delivery_dropped") != 1 {
			t.Fatalf("%d left, %d dropped: want the spanless one dropped and audited", f.pending(t), f.audited(t, "delivery_dropped"))
		}
	})
	t.Run("no expander", func(t *testing.T) {
		f, r := expandFixture(t, func() error { return nil })
		f.flush(t)
		if got := fmt.Sprint(f.p.Calls()); got != "[thread "+r.ID.String()+"]" || f.pending(t) != 2 {
			t.Fatalf("delivered %s, %d left: want the thread held at the expansion", got, f.pending(t))
		}
		if n := f.audited(t, "delivery_failed"); n == 0 {
			t.Fatal("the waiting expansion was not audited")
		}
	})
}

// EndedTx renders EndedEffects effects (the span an expiry reserves for
// them), and Prepare refuses an expand effect without a span.
func TestEndedEffects(t *testing.T) {
	f := newFixture(t)
	r := f.create(t)
	ended, err := f.svc.Apply(context.Background(), r.ID, requests.Change{Event: requests.Cancel, Actor: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := f.db.View(context.Background(), func(tx store.Tx) error {
		ps, err := f.th.EndedTx(tx, ended, chat.Console)
		n = len(ps)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != threads.EndedEffects {
		t.Fatalf("EndedTx rendered %d effects, EndedEffects is %d", n, threads.EndedEffects)
	}
	if _, err := threads.Prepare(threads.Effect{Op: threads.OpExpand, Request: r.ID.String(), Surface: chat.Console}); err == nil {
		t.Fatal("Prepare took an expand effect without a span")
	}
}

// audited counts the audit records of action.
func (f *fixture) audited(t *testing.T, action string) int {
	t.Helper()
	recs, err := audit.List(context.Background(), f.db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Action == action {
			n++
		}
	}
	return n
}
