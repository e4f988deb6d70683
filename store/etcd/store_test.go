package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func open(t *testing.T, cli *clientv3.Client, o etcd.Options) *etcd.Store {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = "/t"
	}
	s, err := etcd.New(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func keys(t *testing.T, tx store.Tx, bucket string) []string {
	t.Helper()
	var out []string
	if err := tx.Scan(bucket, "", "", func(k string, _ []byte) error {
		out = append(out, k)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestScanSeesOwnWrites scans a bucket bigger than one range page while the
// transaction has put, replaced and deleted keys in it: the scan shows the
// transaction's view, in order.
func TestScanSeesOwnWrites(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s := open(t, cli, etcd.Options{Prefix: "/own"})
	ctx := context.Background()
	const n = 600 // more than two pages
	for i := 0; i < n; i += 2 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/own/b/%04d", i), "old"); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := 0; i < n; i += 100 {
			_ = tx.Put("b", fmt.Sprintf("%04d", i+1), []byte("new"))  // between stored keys
			_ = tx.Put("b", fmt.Sprintf("%04d", i+2), []byte("repl")) // replaces a stored key
			_ = tx.Delete("b", fmt.Sprintf("%04d", i+4))              // deletes a stored key
		}
		_ = tx.Put("b", "9999", []byte("last")) // after every stored key
		var got []string
		prev := ""
		err := tx.Scan("b", "", "", func(k string, v []byte) error {
			if k <= prev {
				t.Errorf("scan out of order: %s after %s", k, prev)
			}
			prev = k
			got = append(got, k+"="+string(v))
			return nil
		})
		want := n/2 + n/100 - n/100 + 1
		if len(got) != want {
			t.Errorf("scan saw %d keys, want %d", len(got), want)
		}
		for _, probe := range []string{"0001=new", "0002=repl", "0101=new", "0202=repl", "9999=last"} {
			found := false
			for _, g := range got {
				found = found || g == probe
			}
			if !found {
				t.Errorf("scan did not show %s", probe)
			}
		}
		for _, g := range got {
			if g == "0004=old" || g == "0104=old" {
				t.Errorf("scan showed deleted %s", g)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTooLargeIsRefused: one Update with more writes than one etcd Txn can
// carry is refused whole; many small Updates queued together are split over
// several Txns and all commit.
func TestTooLargeIsRefused(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv.Client(t), etcd.Options{MaxTxnOps: 16})
	ctx := context.Background()
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := 0; i < 20; i++ {
			if err := tx.Put("big", fmt.Sprint(i), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, etcd.ErrTooLarge) || !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Update of 20 writes with max 16 ops: %v, want ErrTooLarge", err)
	}
	_ = s.View(ctx, func(tx store.Tx) error {
		if k := keys(t, tx, "big"); len(k) != 0 {
			t.Errorf("a refused Update wrote %v", k)
		}
		return nil
	})

	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(ctx, func(tx store.Tx) error {
				for j := 0; j < 5; j++ {
					if err := tx.Put("small", fmt.Sprintf("%02d-%d", i, j), nil); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Update %d: %v", i, err)
		}
	}
	_ = s.View(ctx, func(tx store.Tx) error {
		if k := keys(t, tx, "small"); len(k) != 200 {
			t.Errorf("%d keys written, want 200", len(k))
		}
		return nil
	})
}

// keyFence is the minimal Fence over one etcd key: the term is the key's
// CreateRevision when the test created it.
type keyFence struct {
	key  string
	rev  int64
	lost atomic.Int64
}

// newFence creates the election key /election/a and returns the fence of
// its term.
func newFence(t *testing.T, cli *clientv3.Client) *keyFence {
	t.Helper()
	put, err := cli.Put(context.Background(), "/election/a", "")
	if err != nil {
		t.Fatal(err)
	}
	return &keyFence{key: "/election/a", rev: put.Header.Revision}
}

func (f *keyFence) Term() (string, int64, bool) { return f.key, f.rev, f.lost.Load() == 0 }
func (f *keyFence) Unsure() bool                { return false }
func (f *keyFence) Lost(key string, rev int64) {
	if key == f.key {
		f.lost.Store(rev)
	}
}

// TestFence: writes commit while the fence key has the term's revision; once
// the key is replaced (another leader), the next write is refused with
// ErrFenced, the fence is told, and later writes are refused without trying.
func TestFence(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	f := newFence(t, cli)
	s := open(t, cli, etcd.Options{Fence: f})
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.Put("b", "k", []byte("1")) }); err != nil {
		t.Fatalf("fenced write while leading: %v", err)
	}
	// Another term: the key is deleted and created again.
	if _, err := cli.Delete(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, f.key, ""); err != nil {
		t.Fatal(err)
	}
	err := s.Update(ctx, func(tx store.Tx) error { return tx.Put("b", "k", []byte("2")) })
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("write after the term ended: %v, want ErrFenced", err)
	}
	if f.lost.Load() != f.rev {
		t.Errorf("fence not told of the loss")
	}
	err = s.Update(ctx, func(tx store.Tx) error { return tx.Put("b", "k", []byte("3")) })
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("write after the loss was known: %v, want ErrFenced", err)
	}
	_ = s.View(ctx, func(tx store.Tx) error {
		if v, _ := tx.Get("b", "k"); string(v) != "1" {
			t.Errorf("value = %q, want 1: a fenced write landed", v)
		}
		return nil
	})
}

// TestMaxWritesFitsAFencedTxn: an Update of MaxWrites keys commits on a
// fenced store, whose Txns also read the election key; one more is
// refused.
func TestMaxWritesFitsAFencedTxn(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	s := open(t, cli, etcd.Options{Fence: newFence(t, cli), MaxTxnOps: 16})
	if s.MaxWrites() != 15 {
		t.Fatalf("MaxWrites = %d with 16 ops a Txn, want 15", s.MaxWrites())
	}
	write := func(n int) error {
		return s.Update(ctx, func(tx store.Tx) error {
			for i := range n {
				if err := tx.Put(fmt.Sprintf("b%d", n), fmt.Sprint(i), nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := write(s.MaxWrites()); err != nil {
		t.Fatalf("Update of MaxWrites keys: %v", err)
	}
	if err := write(s.MaxWrites() + 1); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Update of MaxWrites+1 keys: %v, want ErrTooLarge", err)
	}
}

// TestReadCompares: when another writer changes a key or a scanned range
// between the transaction's read and its commit, the commit is refused by
// the read compares and the transaction runs again on fresh data: no update
// is lost.
func TestReadCompares(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	s := open(t, cli, etcd.Options{Prefix: "/rc"})
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/rc/c/n", "1"); err != nil {
		t.Fatal(err)
	}
	runs := 0
	err := s.Update(ctx, func(tx store.Tx) error {
		runs++
		v, err := tx.Get("c", "n")
		if err != nil {
			return err
		}
		if runs == 1 { // a foreign write lands between the read and the commit
			if _, err := cli.Put(ctx, "/rc/c/n", "5"); err != nil {
				return err
			}
		}
		return tx.Put("c", "n", append(v, '+'))
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Errorf("fn ran %d times, want 2 (once more after the conflict)", runs)
	}
	got, _ := cli.Get(ctx, "/rc/c/n")
	if v := string(got.Kvs[0].Value); v != "5+" {
		t.Errorf("value = %q, want 5+ (the increment of the newest value)", v)
	}

	runs = 0
	err = s.Update(ctx, func(tx store.Tx) error {
		runs++
		n := len(keys(t, tx, "q"))
		if runs == 1 {
			if _, err := cli.Put(ctx, "/rc/q/x", ""); err != nil {
				return err
			}
		}
		return tx.Put("count", "q", []byte(fmt.Sprint(n)))
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = cli.Get(ctx, "/rc/count/q")
	if runs != 2 || string(got.Kvs[0].Value) != "1" {
		t.Errorf("runs %d, count %q; want 2 runs and count 1 (the scan saw the inserted key)", runs, got.Kvs[0].Value)
	}
}

// TestBadBucket: bucket names are path segments.
func TestBadBucket(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv.Client(t), etcd.Options{})
	err := s.Update(context.Background(), func(tx store.Tx) error { return tx.Put("a/b", "k", nil) })
	if err == nil {
		t.Fatal("a bucket with '/' was accepted")
	}
}

// TestEmptyUpdateIsFenced: with a fence, an Update that writes nothing still
// fails once the term is over (it serves as a claim before an outside
// effect).
func TestEmptyUpdateIsFenced(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	f := newFence(t, cli)
	s := open(t, cli, etcd.Options{Fence: f})
	noop := func(store.Tx) error { return nil }
	if err := s.Update(ctx, noop); err != nil {
		t.Fatalf("empty Update while leading: %v", err)
	}
	if _, err := cli.Delete(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, noop); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("empty Update after the term ended: %v, want ErrFenced", err)
	}
}

// The next group starts from what the last one read and wrote (no round
// trip for the same keys), but a key changed behind the store's back meanwhile
// is a conflict: the Update runs again from etcd and sees the new value, and a
// deleted one reads as missing.
func TestWarmCacheNeverServesAStaleValue(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	t.Cleanup(etcd.KeepWarm(time.Hour))
	s := open(t, cli, etcd.Options{Prefix: "/wc"})
	ctx := context.Background()
	incr := func() (string, int) { return incrWith(t, s, nil) }
	if seen, _ := incr(); seen != "" {
		t.Fatalf("first read %q, want nothing", seen)
	}
	if seen, runs := incr(); seen != "+" || runs != 1 {
		t.Errorf("second: read %q in %d runs, want + in 1 (from the warm cache, no conflict)", seen, runs)
	}
	if _, err := cli.Put(ctx, "/wc/c/n", "5"); err != nil {
		t.Fatal(err)
	}
	if seen, runs := incr(); seen != "5" || runs != 2 {
		t.Errorf("after a foreign write: read %q in %d runs, want 5 in 2", seen, runs)
	}
	if _, err := cli.Delete(ctx, "/wc/c/n"); err != nil {
		t.Fatal(err)
	}
	if seen, _ := incr(); seen != "" {
		t.Errorf("after a foreign delete: read %q, want nothing", seen)
	}
	got, _ := cli.Get(ctx, "/wc/c/n")
	if v := string(got.Kvs[0].Value); v != "+" {
		t.Errorf("value %q, want +", v)
	}
}

// incrWith appends a '+' to key c/n in one Update (which also runs more, if
// given) and returns what it read there and how many times the Update ran.
func incrWith(t *testing.T, s *etcd.Store, more func(store.Tx) error) (string, int) {
	t.Helper()
	runs := 0
	var seen string
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		runs++
		v, err := tx.Get("c", "n")
		if errors.Is(err, store.ErrNotFound) {
			v, err = nil, nil
		}
		if err != nil {
			return err
		}
		seen = string(v)
		if more != nil {
			if err := more(tx); err != nil {
				return err
			}
		}
		return tx.Put("c", "n", append(v, '+'))
	}); err != nil {
		t.Fatal(err)
	}
	return seen, runs
}

// gets counts the reads (Get calls) a client makes.
type gets struct {
	clientv3.KV
	n atomic.Int64
}

func (g *gets) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	g.n.Add(1)
	return g.KV.Get(ctx, key, opts...)
}

// The warm cache is bounded: a key every group reads stays in it (never
// read from etcd again), a key read once and then not again leaves it,
// and it never holds more than two generations of keys, however many the
// groups write. An Update that only reads, from the warm cache's revision,
// still sees a foreign write made since.
func TestWarmCacheIsBounded(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	t.Cleanup(etcd.KeepWarm(time.Hour)) // restored after the store closes
	counted := &gets{KV: cli.KV}
	cli.KV = counted
	s := open(t, cli, etcd.Options{Prefix: "/wb"})
	ctx := context.Background()
	readOnce := func() (string, int64) {
		var v []byte
		before := counted.n.Load()
		if err := s.Update(ctx, func(tx store.Tx) error {
			var err error
			v, err = tx.Get("x", "once")
			if errors.Is(err, store.ErrNotFound) {
				v, err = []byte("ours"), tx.Put("x", "once", []byte("ours"))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return string(v), counted.n.Load() - before
	}
	readOnce()
	incrWith(t, s, nil)
	if v, n := readOnce(); v != "ours" || n != 0 {
		t.Fatalf("x/once read again at once: %q with %d reads from etcd, want ours with 0 (warm)", v, n)
	}
	before := counted.n.Load()
	const perUpdate = 100
	for i := 0; i < 3*etcd.WarmKeys/perUpdate; i++ {
		incrWith(t, s, func(tx store.Tx) error {
			for j := range perUpdate {
				if err := tx.Put("r", fmt.Sprintf("%06d", i*perUpdate+j), []byte("value")); err != nil {
					return err
				}
			}
			return nil
		})
		if n := s.WarmLen(); n > 2*etcd.WarmKeys+perUpdate+2 {
			t.Fatalf("after %d keys written the warm cache holds %d, want at most two generations of %d", (i+1)*perUpdate, n, etcd.WarmKeys)
		}
	}
	if n := counted.n.Load() - before; n != 0 {
		t.Errorf("the key every group reads was read %d times from etcd, want 0 (warm throughout)", n)
	}
	if v, n := readOnce(); v != "ours" || n != 1 {
		t.Errorf("x/once after %d other keys: %q with %d reads from etcd, want ours with 1 (gone from the cache)", 3*etcd.WarmKeys, v, n)
	}
	incrWith(t, s, nil) // a write: the next group starts warm
	if _, err := cli.Put(ctx, "/wb/x/once", "theirs"); err != nil {
		t.Fatal(err)
	}
	if v, _ := readOnce(); v != "theirs" {
		t.Errorf("a read-only Update after a foreign write: %q, want theirs", v)
	}
}

// A new term of this instance starts cold: another leader may have written
// between its terms, so the warm cache of the earlier one is not used (the
// group reads from etcd and runs once, not twice after a conflict).
func TestWarmCacheIsPerTerm(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	t.Cleanup(etcd.KeepWarm(time.Hour))
	f := newFence(t, cli)
	s := open(t, cli, etcd.Options{Prefix: "/wt", Fence: f})
	incrWith(t, s, nil)
	newTerm := func() int64 {
		if _, err := cli.Delete(ctx, f.key); err != nil {
			t.Fatal(err)
		}
		put, err := cli.Put(ctx, f.key, "")
		if err != nil {
			t.Fatal(err)
		}
		return put.Header.Revision
	}
	newTerm() // another leader's term, in which it writes
	if _, err := cli.Put(ctx, "/wt/c/n", "5"); err != nil {
		t.Fatal(err)
	}
	f.rev = newTerm() // this instance leads again
	if seen, runs := incrWith(t, s, nil); seen != "5" || runs != 1 {
		t.Errorf("first Update of the new term: read %q in %d runs, want 5 in 1 (from etcd, not the last term's cache)", seen, runs)
	}
}

// A group that read at the warm cache's revision more keys than its Txn
// can compare runs again from etcd: an uncompared warm read may be stale.
func TestWarmGroupOverTheOpsLimitRunsAgain(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()
	t.Cleanup(etcd.KeepWarm(time.Hour))
	s := open(t, cli, etcd.Options{Prefix: "/wl", MaxTxnOps: 8})
	const n = 21
	for from := 0; from < n; from += 7 {
		if err := s.Update(ctx, func(tx store.Tx) error {
			for i := from; i < from+7; i++ {
				if err := tx.Put("b", fmt.Sprintf("k%02d", i), []byte("ours")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("k%02d", n-1) // compared last, so not at all
	if _, err := cli.Put(ctx, "/wl/b/"+last, "theirs"); err != nil {
		t.Fatal(err)
	}
	var seen string
	runs := 0
	if err := s.Update(ctx, func(tx store.Tx) error {
		runs++
		for i := range n {
			v, err := tx.Get("b", fmt.Sprintf("k%02d", i))
			if err != nil {
				return err
			}
			seen = string(v)
		}
		return tx.Put("b", "sum", []byte(seen))
	}); err != nil {
		t.Fatal(err)
	}
	if seen != "theirs" || runs != 2 {
		t.Errorf("%s read %q in %d runs, want theirs in 2 (the warm run compared 8 of %d reads)", last, seen, runs, n)
	}
}
