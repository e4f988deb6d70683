// Package storetest is the contract suite that every store.Store
// implementation must pass.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
)

// Opener prepares fresh, empty storage for one test and returns a func that
// opens it. The func may be called again after the previous store was closed,
// and must then open the same data (a restart).
type Opener func(t *testing.T) func() store.Store

// Run runs the whole contract suite against the implementation behind open.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, func() store.Store)
	}{
		{"GetPutDelete", testGetPutDelete},
		{"Unchanged", testUnchanged},
		{"Scan", testScan},
		{"RollbackOnError", testRollback},
		{"SerializableIncrements", testSerializable},
		{"FailedCallDoesNotSpoilOthers", testFailedCallIsolated},
		{"Notify", testNotify},
		{"Sequences", testSequences},
		{"SequencesShareCommits", testSequencesShareCommits},
		{"Timers", testTimers},
		{"Outbox", testOutbox},
		{"OutboxExpand", testOutboxExpand},
		{"Dedupe", testDedupe},
		{"Durable", testDurable},
		{"UnfinishedRestore", testUnfinishedRestore},
		{"Format", testFormat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
	t.Run("BackupRestore", func(t *testing.T) { testBackupRestore(t, open) })
}

func mustOpen(t *testing.T, open func() store.Store) store.Store {
	t.Helper()
	s := open()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func update(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.View(context.Background(), fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func testGetPutDelete(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	view(t, s, func(tx store.Tx) error {
		if _, err := tx.Get("b", "k"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get on empty store: err = %v, want ErrNotFound", err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.Put("b", "k", []byte("v1")) })
	view(t, s, func(tx store.Tx) error {
		v, err := tx.Get("b", "k")
		if err != nil || string(v) != "v1" {
			t.Errorf("Get = %q, %v; want v1", v, err)
		}
		if _, err := tx.Get("other", "k"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("buckets are not separate: err = %v", err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.Delete("b", "k"); err != nil {
			return err
		}
		if _, err := tx.Get("b", "k"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("deleted key readable in same tx: %v", err)
		}
		return tx.Delete("b", "missing")
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.Put("b", "empty", nil); err != nil {
			return err
		}
		v, err := tx.Get("b", "empty")
		if err != nil || len(v) != 0 {
			t.Errorf("empty value: %q, %v", v, err)
		}
		return nil
	})
}

// testUnchanged: store.Unchanged compares a stored value with the bytes
// given, in a write transaction and a read-only one, after writes in the
// same transaction too; a missing key or bucket is ErrNotFound.
func testUnchanged(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	check := func(tx store.Tx, key string, want []byte, same bool, missing bool) {
		t.Helper()
		got, err := store.Unchanged(tx, "b", key, want)
		switch {
		case missing && !errors.Is(err, store.ErrNotFound):
			t.Errorf("Unchanged(%s, %q) = %v, %v; want ErrNotFound", key, want, got, err)
		case !missing && (err != nil || got != same):
			t.Errorf("Unchanged(%s, %q) = %v, %v; want %v", key, want, got, err, same)
		}
	}
	update(t, s, func(tx store.Tx) error {
		check(tx, "k", []byte("v1"), false, true) // no bucket yet
		if err := tx.Put("b", "k", []byte("v1")); err != nil {
			return err
		}
		if err := tx.Put("b", "empty", nil); err != nil {
			return err
		}
		check(tx, "k", []byte("v1"), true, false)
		check(tx, "k", []byte("v2"), false, false)
		check(tx, "k", []byte("v"), false, false)
		check(tx, "empty", nil, true, false)
		check(tx, "missing", nil, false, true)
		return nil
	})
	for _, run := range []func(*testing.T, store.Store, func(store.Tx) error){view, update} {
		run(t, s, func(tx store.Tx) error {
			if _, err := store.Unchanged(tx, "nobucket", "k", nil); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Unchanged in a missing bucket: %v, want ErrNotFound", err)
			}
			check(tx, "k", []byte("v1"), true, false)
			check(tx, "k", []byte("v1 "), false, false)
			check(tx, "empty", []byte{}, true, false)
			check(tx, "missing", []byte("v1"), false, true)
			return nil
		})
	}
	update(t, s, func(tx store.Tx) error {
		if err := tx.Put("b", "k", []byte("v2")); err != nil {
			return err
		}
		check(tx, "k", []byte("v1"), false, false) // its own write
		check(tx, "k", []byte("v2"), true, false)
		if err := tx.Delete("b", "k"); err != nil {
			return err
		}
		check(tx, "k", []byte("v2"), false, true)
		return nil
	})
}

func testScan(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	keys := []string{"a/1", "a/2", "a/10", "b/1", "c"}
	update(t, s, func(tx store.Tx) error {
		for _, k := range keys {
			if err := tx.Put("s", k, []byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	scan := func(from, to string, limit int) string {
		var got []string
		view(t, s, func(tx store.Tx) error {
			return tx.Scan("s", from, to, func(k string, v []byte) error {
				if string(v) != k {
					t.Errorf("value of %s = %q", k, v)
				}
				got = append(got, k)
				if limit > 0 && len(got) == limit {
					return store.ErrStop
				}
				return nil
			})
		})
		return fmt.Sprint(got)
	}
	for _, c := range []struct {
		from, to string
		limit    int
		want     string
	}{
		{"", "", 0, "[a/1 a/10 a/2 b/1 c]"},
		{"a/", store.PrefixEnd("a/"), 0, "[a/1 a/10 a/2]"},
		{"a/2", "c", 0, "[a/2 b/1]"},
		{"", "", 2, "[a/1 a/10]"},
		{"d", "", 0, "[]"},
	} {
		if got := scan(c.from, c.to, c.limit); got != c.want {
			t.Errorf("Scan(%q, %q, limit %d) = %s, want %s", c.from, c.to, c.limit, got, c.want)
		}
	}
	boom := errors.New("boom")
	err := s.View(context.Background(), func(tx store.Tx) error {
		return tx.Scan("s", "", "", func(string, []byte) error { return boom })
	})
	if !errors.Is(err, boom) {
		t.Errorf("Scan callback error not returned: %v", err)
	}
	view(t, s, func(tx store.Tx) error {
		return tx.Scan("nobucket", "", "", func(string, []byte) error {
			t.Error("scan of missing bucket called back")
			return nil
		})
	})
}

func testRollback(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.Put("b", "k", []byte("v")); err != nil {
			return err
		}
		tx.Notify("t")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want the fn's error", err)
	}
	view(t, s, func(tx store.Tx) error {
		if _, err := tx.Get("b", "k"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("write of a failed transaction is visible: %v", err)
		}
		return nil
	})
}

// testSerializable increments one counter from many goroutines with
// read-modify-write transactions: every increment must count.
func testSerializable(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				errs <- s.Update(context.Background(), func(tx store.Tx) error {
					var n int
					v, err := tx.Get("c", "n")
					if err == nil {
						n = int(v[0])<<8 | int(v[1])
					} else if !errors.Is(err, store.ErrNotFound) {
						return err
					}
					n++
					return tx.Put("c", "n", []byte{byte(n >> 8), byte(n)})
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	view(t, s, func(tx store.Tx) error {
		v, err := tx.Get("c", "n")
		if err != nil {
			return err
		}
		if n := int(v[0])<<8 | int(v[1]); n != workers*each {
			t.Errorf("counter = %d, want %d: lost updates", n, workers*each)
		}
		return nil
	})
}

// testFailedCallIsolated runs failing and succeeding transactions
// concurrently: the failures must not take the others down with them.
func testFailedCallIsolated(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	const n = 64
	var wg sync.WaitGroup
	results := make([]error, n)
	boom := errors.New("boom")
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.Update(context.Background(), func(tx store.Tx) error {
				if err := tx.Put("iso", fmt.Sprintf("%03d", i), []byte{1}); err != nil {
					return err
				}
				if i%3 == 0 {
					return boom
				}
				return nil
			})
		}()
	}
	wg.Wait()
	view(t, s, func(tx store.Tx) error {
		for i := 0; i < n; i++ {
			_, err := tx.Get("iso", fmt.Sprintf("%03d", i))
			if i%3 == 0 {
				if !errors.Is(results[i], boom) || !errors.Is(err, store.ErrNotFound) {
					t.Errorf("call %d: result %v, key err %v; want boom and not found", i, results[i], err)
				}
			} else if results[i] != nil || err != nil {
				t.Errorf("call %d: result %v, key err %v; want committed", i, results[i], err)
			}
		}
		return nil
	})
}

func waitSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s")
	}
}

func testNotify(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	ch, cancel := s.Subscribe("agent:a")
	defer cancel()
	other, cancelOther := s.Subscribe("agent:b")
	defer cancelOther()

	_ = s.Update(context.Background(), func(tx store.Tx) error {
		tx.Notify("agent:a")
		return errors.New("rolled back")
	})
	update(t, s, func(tx store.Tx) error {
		tx.Notify("agent:a")
		tx.Notify("agent:a")
		return tx.Put("b", "k", []byte("v"))
	})
	waitSignal(t, ch)
	select {
	case <-ch:
		t.Error("a rolled-back or repeated Notify produced a second signal")
	default:
	}
	select {
	case <-other:
		t.Error("subscriber of another topic was woken")
	default:
	}
	cancel()
	update(t, s, func(tx store.Tx) error { tx.Notify("agent:a"); return nil })
	select {
	case <-ch:
		t.Error("cancelled subscription still receives")
	default:
	}
}

func testTimers(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	update(t, s, func(tx store.Tx) error {
		for i := 0; i < 10; i++ {
			if err := store.AddTimer(tx, "approval", base.Add(time.Duration(i)*time.Second), fmt.Sprintf("a%d", i)); err != nil {
				return err
			}
		}
		return store.AddTimer(tx, "other", base, "o1")
	})
	view(t, s, func(tx store.Tx) error {
		due, err := store.DueTimers(tx, "approval", base.Add(3*time.Second), 0)
		if err != nil {
			return err
		}
		if got := fmt.Sprint(ids(due)); got != "[a0 a1 a2 a3]" {
			t.Errorf("due at +3s = %s, want [a0 a1 a2 a3] (due time inclusive)", got)
		}
		if !due[3].Due.Equal(base.Add(3 * time.Second)) {
			t.Errorf("due time = %v", due[3].Due)
		}
		due, _ = store.DueTimers(tx, "approval", base.Add(time.Hour), 2)
		if got := fmt.Sprint(ids(due)); got != "[a0 a1]" {
			t.Errorf("limit 2 = %s", got)
		}
		due, _ = store.DueTimers(tx, "approval", base.Add(-time.Millisecond), 0)
		if len(due) != 0 {
			t.Errorf("nothing due yet, got %v", ids(due))
		}
		// Page by page: each page from the timer that ended the one before.
		var pages []string
		for after := (store.Timer{}); ; {
			page, err := store.DueTimersAfter(tx, "approval", base.Add(4*time.Second), after, 2)
			if err != nil || len(page) == 0 {
				break
			}
			pages, after = append(pages, fmt.Sprint(ids(page))), page[len(page)-1]
		}
		if got := fmt.Sprint(pages); got != "[[a0 a1] [a2 a3] [a4]]" {
			t.Errorf("pages of 2 due at +4s = %s, want [[a0 a1] [a2 a3] [a4]]", got)
		}
		next, ok, err := store.NextTimer(tx, "approval")
		if err != nil || !ok || next.ID != "a0" {
			t.Errorf("NextTimer = %v %v %v", next, ok, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return store.RemoveTimer(tx, "approval", base, "a0") })
	view(t, s, func(tx store.Tx) error {
		next, ok, _ := store.NextTimer(tx, "approval")
		if !ok || next.ID != "a1" {
			t.Errorf("after remove, NextTimer = %v", next)
		}
		_, ok, _ = store.NextTimer(tx, "none")
		if ok {
			t.Error("NextTimer of empty kind found something")
		}
		return nil
	})
}

func ids(ts []store.Timer) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func testDedupe(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	check := func(key string, at time.Time, want bool) {
		t.Helper()
		update(t, s, func(tx store.Tx) error {
			fresh, err := store.Dedupe(tx, key, at, time.Hour)
			if err != nil {
				return err
			}
			if fresh != want {
				t.Errorf("Dedupe(%s at %v) = %v, want %v", key, at.Format(time.Kitchen), fresh, want)
			}
			return nil
		})
	}
	check("slack:Ev1", now, true)
	check("slack:Ev1", now.Add(time.Minute), false)
	check("slack:Ev2", now, true)
	check("slack:Ev1", now.Add(time.Hour+time.Second), true)
	update(t, s, func(tx store.Tx) error {
		n, next, err := store.PurgeDedupe(tx, now.Add(90*time.Minute), "", 0)
		if next != "" {
			t.Errorf("PurgeDedupe without a limit stopped at %q", next)
		}
		if err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("purged %d, want 1 (Ev2 only; Ev1 was renewed)", n)
		}
		return nil
	})
	check("slack:Ev1", now.Add(90*time.Minute), false)
}

func testDurable(t *testing.T, open func() store.Store) {
	s := open()
	update(t, s, func(tx store.Tx) error {
		if _, err := store.NextSeq(tx, "ids"); err != nil {
			return err
		}
		return tx.Put("b", "k", []byte("kept"))
	})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Update(context.Background(), func(store.Tx) error { return nil }); err == nil {
		t.Error("Update after Close succeeded")
	}
	s = mustOpen(t, open)
	view(t, s, func(tx store.Tx) error {
		v, err := tx.Get("b", "k")
		if err != nil || string(v) != "kept" {
			t.Errorf("after reopen Get = %q, %v", v, err)
		}
		if n, _ := store.Seq(tx, "ids"); n != 1 {
			t.Errorf("after reopen Seq = %d", n)
		}
		return nil
	})
}
