package approvals_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/ttl"
	bbolt "go.etcd.io/bbolt"
)

// BenchmarkSweepCeiling measures the sweep of BenchmarkSweep (bolt, 10,000
// due) beside its raw ceiling in the same run. Each iteration copies the
// store's file twice just before the sweep. The sweep is timed on the
// first copy, as a bridge started on it would make it (fresh services, no
// recording). The same sweep is then made on the store itself, recording
// the bbolt reads and writes of its write transactions, and replayed
// through bbolt alone on the second copy, on one goroutine, in as many
// commits: the ceiling. The sweep waits on its single writer, so it cannot
// take less than the replay: ratio (the median of each iteration's sweep
// over its replay) tells how much of the sweep is not bbolt's, whatever
// the machine's speed; recorded-ratio is the same for the recorded sweep
// (the recording's own cost in it); ops/expiry is the bbolt calls an
// expiry made in the writer. Both copies are checked to end with every
// key the recorded sweep wrote as it left it. 1,000,000 pending only with
// ROOMBRIDGE_BIG=1 (two copies of 1.5 GB a sweep).
func BenchmarkSweepCeiling(b *testing.B) {
	cases := []sweepCase{{100_000, 10_000}}
	if os.Getenv("ROOMBRIDGE_BIG") != "" {
		cases = append(cases, sweepCase{1_000_000, 10_000})
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("pending=%d/due=%d", c.pending, c.due), func(sub *testing.B) {
			benchCeiling(sub, fixture(b, sub, "bolt", c.pending), c.due)
		})
	}
}

// ceilingRun is what one iteration of BenchmarkSweepCeiling measured.
type ceilingRun struct {
	sweep, recorded, replay time.Duration
	ops, expired            int
}

func benchCeiling(b *testing.B, f *benchFixture, due int) {
	rec := &recording{DB: f.db.(*bolt.DB)}
	_, _, sw := cardServices(b, rec, f.clk)
	var runs []ceilingRun
	for i := 0; i < b.N; i++ {
		f.addDue(b, due)
		f.clk.Set(sweepAt)
		runs = append(runs, ceilingOnce(b, f, rec, sw, due))
	}
	ratio := func(d func(ceilingRun) time.Duration) float64 {
		rs := make([]float64, 0, len(runs))
		for _, r := range runs {
			rs = append(rs, float64(d(r))/float64(r.replay))
		}
		slices.Sort(rs)
		return rs[len(rs)/2]
	}
	b.ReportMetric(ms(medianOf(runs, func(r ceilingRun) time.Duration { return r.sweep })), "sweep-ms")
	b.ReportMetric(ms(medianOf(runs, func(r ceilingRun) time.Duration { return r.replay })), "ceiling-ms")
	b.ReportMetric(ratio(func(r ceilingRun) time.Duration { return r.sweep }), "ratio")
	b.ReportMetric(ratio(func(r ceilingRun) time.Duration { return r.recorded }), "recorded-ratio")
	var ops, expired int
	for _, r := range runs {
		ops, expired = ops+r.ops, expired+r.expired
	}
	b.ReportMetric(float64(ops)/float64(expired), "ops/expiry")
}

// ceilingOnce is one iteration of BenchmarkSweepCeiling: the sweep timed
// on a copy, then recorded on the store, then replayed on another copy.
func ceilingOnce(b *testing.B, f *benchFixture, rec *recording, sw *ttl.Sweeper, due int) ceilingRun {
	ctx := context.Background()
	db := f.db.(*bolt.DB)
	timed := copyBolt(b, db, filepath.Join(f.dir, "timed.db"))
	cp := copyBolt(b, db, filepath.Join(f.dir, "ceiling.db"))
	defer func() {
		for _, c := range []*bolt.DB{timed, cp} {
			_ = c.Close()
			_ = os.Remove(c.Path())
		}
	}()
	_, _, timedSweep := cardServices(b, timed, f.clk)
	var run ceilingRun
	runtime.GC()
	t0 := time.Now()
	res, err := timedSweep.SweepOnce(ctx)
	run.sweep = time.Since(t0)
	if err != nil || res.Expired != due || res.Failed != 0 {
		b.Fatalf("timed sweep %+v, %v: want %d expired", res, err, due)
	}
	runtime.GC()
	id0 := lastTx(rec.Bolt())
	rec.start()
	t0 = time.Now()
	res, err = sw.SweepOnce(ctx)
	run.recorded = time.Since(t0)
	calls := rec.stop()
	if err != nil || res.Expired != due || res.Failed != 0 {
		b.Fatalf("sweep %+v, %v: want %d expired", res, err, due)
	}
	commits := lastTx(rec.Bolt()) - id0
	runtime.GC()
	t0 = time.Now()
	if err := replay(cp.Bolt(), calls, commits); err != nil {
		b.Fatal(err)
	}
	run.replay = time.Since(t0)
	if err := sameWrites(rec.Bolt(), cp.Bolt(), calls); err != nil {
		b.Fatalf("replay: %v", err)
	}
	if err := sameSweep(rec.Bolt(), timed.Bolt(), calls); err != nil {
		b.Fatalf("timed sweep: %v", err)
	}
	run.ops, run.expired = countOps(calls), res.Expired
	return run
}

func medianOf(runs []ceilingRun, d func(ceilingRun) time.Duration) time.Duration {
	ds := make([]time.Duration, 0, len(runs))
	for _, r := range runs {
		ds = append(ds, d(r))
	}
	return median(ds)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// copyBolt copies db's file to path (as of now, pages faulted in, as the
// store's own are) and opens the copy.
func copyBolt(b *testing.B, db *bolt.DB, path string) *bolt.DB {
	err := db.Bolt().View(func(tx *bbolt.Tx) error { return tx.CopyFile(path, 0o600) })
	if err != nil {
		b.Fatal(err)
	}
	cp, err := bolt.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	err = cp.Bolt().View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, bk *bbolt.Bucket) error {
			return bk.ForEach(func(_, _ []byte) error { return nil })
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return cp
}

// lastTx is the ID of db's last committed write transaction.
func lastTx(db *bbolt.DB) int {
	tx, err := db.Begin(false)
	if err != nil {
		return 0
	}
	defer func() { _ = tx.Rollback() }()
	return tx.ID()
}

// recording is the bolt store of a sweep that, between start and stop,
// records what the calls of its write transactions read and wrote, in the
// order they ran.
type recording struct {
	*bolt.DB
	on    atomic.Bool
	runs  atomic.Int64
	mu    sync.Mutex
	calls []recCall
}

// recCall is what one call of a write transaction did (its last run: a
// call that the group commit ran again has only that run recorded).
type recCall struct {
	run int64
	ops []recOp
}

// recOp is one read or write of a call: a get (Get or Equal), a put, a
// delete, or a scan of n keys from key.
type recOp struct {
	kind        byte
	bucket, key string
	value       []byte
	n           int
}

func (r *recording) start() { r.calls = nil; r.on.Store(true) }

// stop ends the recording and returns the calls in the order they ran.
func (r *recording) stop() []recCall {
	r.on.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.SortFunc(r.calls, func(a, b recCall) int { return int(a.run - b.run) })
	return r.calls
}

func (r *recording) Update(ctx context.Context, fn func(store.Tx) error) error {
	if !r.on.Load() {
		return r.DB.Update(ctx, fn)
	}
	var c recCall
	err := r.DB.Update(ctx, func(tx store.Tx) error {
		rt := &recTx{Tx: tx, ops: make([]recOp, 0, 512)}
		err := fn(rt)
		c = recCall{run: r.runs.Add(1), ops: rt.ops}
		return err
	})
	if err == nil {
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
	}
	return err
}

// recTx records a call's reads and writes (values as given: bbolt keeps
// them until the commit, so their callers cannot reuse them).
type recTx struct {
	store.Tx
	ops []recOp
}

func (t *recTx) Get(bucket, key string) ([]byte, error) {
	t.ops = append(t.ops, recOp{kind: 'g', bucket: bucket, key: key})
	return t.Tx.Get(bucket, key)
}

func (t *recTx) Equal(bucket, key string, want []byte) (bool, error) {
	t.ops = append(t.ops, recOp{kind: 'g', bucket: bucket, key: key})
	return t.Tx.(interface {
		Equal(bucket, key string, want []byte) (bool, error)
	}).Equal(bucket, key, want)
}

func (t *recTx) Put(bucket, key string, value []byte) error {
	t.ops = append(t.ops, recOp{kind: 'p', bucket: bucket, key: key, value: value})
	return t.Tx.Put(bucket, key, value)
}

func (t *recTx) Delete(bucket, key string) error {
	t.ops = append(t.ops, recOp{kind: 'd', bucket: bucket, key: key})
	return t.Tx.Delete(bucket, key)
}

func (t *recTx) Scan(bucket, from, to string, fn func(string, []byte) error) error {
	i := len(t.ops)
	t.ops = append(t.ops, recOp{kind: 's', bucket: bucket, key: from})
	return t.Tx.Scan(bucket, from, to, func(k string, v []byte) error {
		t.ops[i].n++
		return fn(k, v)
	})
}

func countOps(calls []recCall) int {
	n := 0
	for _, c := range calls {
		n += len(c.ops)
	}
	return n
}

// replay does calls' reads and writes through bbolt alone, in commits
// transactions of equal numbers of calls, as store/bolt does them: each
// bucket's pages packed alike (bolt.FillPercent), the counters
// (store.BucketSeq) held until the commit.
func replay(db *bbolt.DB, calls []recCall, commits int) error {
	per := (len(calls) + max(commits, 1) - 1) / max(commits, 1)
	for len(calls) > 0 {
		n := min(per, len(calls))
		if err := db.Update(func(tx *bbolt.Tx) error { return replayTx(tx, calls[:n]) }); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		calls = calls[n:]
	}
	return nil
}

func replayTx(tx *bbolt.Tx, calls []recCall) error {
	buckets, counters := map[string]*bbolt.Bucket{}, map[string][]byte{}
	var kb []byte
	for _, c := range calls {
		for _, op := range c.ops {
			if op.bucket == store.BucketSeq && op.kind != 's' {
				if op.kind == 'p' {
					counters[op.key] = op.value
				}
				continue
			}
			bk := buckets[op.bucket]
			if bk == nil {
				var err error
				if bk, err = tx.CreateBucketIfNotExists([]byte(op.bucket)); err != nil {
					return err
				}
				bk.FillPercent = bolt.FillPercent(op.bucket)
				buckets[op.bucket] = bk
			}
			kb = append(kb[:0], op.key...)
			if err := replayOp(bk, op, kb); err != nil {
				return err
			}
		}
	}
	seq := tx.Bucket([]byte(store.BucketSeq))
	for k, v := range counters {
		if err := seq.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

func replayOp(bk *bbolt.Bucket, op recOp, key []byte) error {
	switch op.kind {
	case 'g':
		bk.Get(key)
	case 'p':
		return bk.Put(key, op.value)
	case 'd':
		return bk.Delete(key)
	case 's':
		c := bk.Cursor()
		k, _ := c.Seek(key)
		for i := 1; i < op.n && k != nil; i++ {
			k, _ = c.Next()
		}
	}
	return nil
}

// sameWrites checks that every key calls put or deleted has the same value
// (or none) in a and b.
func sameWrites(a, b *bbolt.DB, calls []recCall) error {
	return a.View(func(ta *bbolt.Tx) error {
		return b.View(func(tb *bbolt.Tx) error {
			for _, c := range calls {
				for _, op := range c.ops {
					if op.kind != 'p' && op.kind != 'd' {
						continue
					}
					va, vb := value(ta, op), value(tb, op)
					if !bytes.Equal(va, vb) || (va == nil) != (vb == nil) {
						return fmt.Errorf("%s/%s is %q, the sweep left %q", op.bucket, op.key, vb, va)
					}
				}
			}
			return nil
		})
	})
}

// sameSweep tells whether the timed sweep (on db) did what the recorded
// one (on rec) did: every key of the records and indexes calls wrote as
// the recorded sweep left it, and as many keys in every bucket. The two
// sweeps' batches commit in their own orders, so the sequence numbers of
// the audit records and outbox effects, and so those keys and values, may
// differ (as their effects' creation times, the wall time: threads'
// EnqueueTx).
func sameSweep(rec, db *bbolt.DB, calls []recCall) error {
	seqd := map[string]bool{"audit": true, "audit_by_request": true, "outbox": true, store.BucketSeq: true}
	var kept []recCall
	for _, c := range calls {
		ops := slices.DeleteFunc(slices.Clone(c.ops), func(op recOp) bool { return seqd[op.bucket] })
		kept = append(kept, recCall{run: c.run, ops: ops})
	}
	if err := sameWrites(rec, db, kept); err != nil {
		return err
	}
	counts := func(db *bbolt.DB) (map[string]int, error) {
		n := map[string]int{}
		return n, db.View(func(tx *bbolt.Tx) error {
			return tx.ForEach(func(name []byte, bk *bbolt.Bucket) error {
				n[string(name)] = bk.Stats().KeyN
				return nil
			})
		})
	}
	want, err := counts(rec)
	if err != nil {
		return err
	}
	got, err := counts(db)
	if err != nil {
		return err
	}
	for name, n := range want {
		if got[name] != n {
			return fmt.Errorf("bucket %s has %d keys, the recorded sweep left %d", name, got[name], n)
		}
	}
	return nil
}

func value(tx *bbolt.Tx, op recOp) []byte {
	bk := tx.Bucket([]byte(op.bucket))
	if bk == nil {
		return nil
	}
	return bk.Get([]byte(op.key))
}
