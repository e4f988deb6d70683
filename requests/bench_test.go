package requests_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// benchCreate runs Create on a bolt file (fsync on, the default) from
// submitters concurrent goroutines and reports requests/s and the p50/p99
// latency of one creation.
func benchCreate(b *testing.B, submitters int) {
	f := newFixture(b)
	ctx := context.Background()
	a := ask("benchmark: please summarise the build log of the nightly run")
	procs := runtime.GOMAXPROCS(0)
	lat := make([]time.Duration, 0, b.N)
	if submitters == 1 {
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if _, err := f.svc.Create(ctx, a); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		reportLatency(b, lat)
		return
	}
	b.SetParallelism((submitters + procs - 1) / procs)
	var mu sync.Mutex
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			start := time.Now()
			if _, err := f.svc.Create(ctx, a); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	b.StopTimer()
	reportLatency(b, lat)
	b.ReportMetric(float64(((submitters+procs-1)/procs)*procs), "submitters")
}

func reportLatency(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op") // req/s says it better
}

// BenchmarkCreateParallel: 8 concurrent submitters (SetParallelism(4) with
// GOMAXPROCS 2). Target: 2,000 req/s or more.
func BenchmarkCreateParallel(b *testing.B) { benchCreate(b, 8) }

// BenchmarkCreateSubmitters shows how the group commit scales with the
// number of concurrent submitters.
func BenchmarkCreateSubmitters(b *testing.B) {
	for _, n := range []int{1, 2, 8, 32, 128} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchCreate(b, n) })
	}
}

// recorder is a store that records the writes of its Updates: the keys and
// value sizes one creation writes, for the raw ceiling to write the same.
type recorder struct {
	store.Store
	mu     sync.Mutex
	writes []rawWrite
}

type rawWrite struct {
	bucket, key string
	size        int
}

type recordingTx struct {
	store.Tx
	r *recorder
}

func (t recordingTx) Put(bucket, key string, v []byte) error {
	t.r.mu.Lock()
	t.r.writes = append(t.r.writes, rawWrite{bucket, key, len(v)})
	t.r.mu.Unlock()
	return t.Tx.Put(bucket, key, v)
}

func (r *recorder) Update(ctx context.Context, fn func(store.Tx) error) error {
	return r.Store.Update(ctx, func(tx store.Tx) error { return fn(recordingTx{tx, r}) })
}

// BenchmarkCreateVsBoltBatch runs, side by side (ten alternating rounds), 8
// concurrent submitters of Create on a bolt file and the raw ceiling: 8
// goroutines of bbolt's own DB.Batch (committing once all 8 are in), each
// call writing the keys and value sizes one creation writes (recorded from a
// real one), on a file opened with the store's options (fsync on). ratio is
// creations/s over the ceiling's (issue 20: at or above 0.79). Creations are
// made as the bridge makes them: each with its platform event key (deduped),
// under the default queue limit. batch-default/s is DB.Batch as bbolt ships
// it (MaxBatchDelay 10 ms, MaxBatchSize 1000), measured on one round: with 8
// submitters it waits out the delay for every batch, so it is no ceiling.
func BenchmarkCreateVsBoltBatch(b *testing.B) {
	const submitters = 8
	askN := func(i int) requests.Ask {
		a := ask("benchmark: please summarise the build log of the nightly run")
		a.EventKey = fmt.Sprintf("slack:Ev%09d", i)
		return a
	}
	rec := &recorder{Store: openDB(b, filepath.Join(b.TempDir(), "rec.db"))}
	recSvc := requests.NewService(rec, clock.NewFake(day0), owner, []string{ownerUser})
	recSvc.SetQueueLimit(config.DefaultQueueLimit)
	for i := range 2 { // the second one: the queue's count exists from the first
		rec.writes = nil
		if _, err := recSvc.Create(context.Background(), askN(-1-i)); err != nil {
			b.Fatal(err)
		}
	}
	writes := rec.writes
	raw, err := bbolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, &bbolt.Options{FreelistType: bbolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	// The ceiling commits as soon as every submitter is in the batch (bbolt
	// would otherwise wait MaxBatchDelay, 10 ms, for a thousand calls).
	raw.MaxBatchSize = submitters
	f := newFixture(b)
	f.svc.SetQueueLimit(config.DefaultQueueLimit)
	// run does ops i in [from, to) from the submitters and returns the time.
	run := func(from, to int, op func(i int) error) time.Duration {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		start := time.Now()
		for range submitters {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < to; i = int(next.Add(1)) - 1 {
					if err := op(i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	rawOp := func(i int) func(*bbolt.Tx) error {
		return func(tx *bbolt.Tx) error {
			for _, w := range writes {
				bk, err := tx.CreateBucketIfNotExists([]byte(w.bucket))
				if err != nil {
					return err
				}
				if err := bk.Put(fmt.Appendf(nil, "%s/%09d", w.key, i), make([]byte, w.size)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	ceilingOp := func(i int) error { return raw.Batch(rawOp(i)) }
	createOp := func(i int) error { _, err := f.svc.Create(context.Background(), askN(i)); return err }
	// Ten alternating rounds of each, so that both see the same load.
	const rounds = 10
	var tCeiling, tCreate time.Duration
	b.ResetTimer()
	for r := range rounds {
		from, to := b.N*r/rounds, b.N*(r+1)/rounds
		tCeiling += run(from, to, ceilingOp)
		tCreate += run(from, to, createOp)
	}
	ceiling, creates := float64(b.N)/tCeiling.Seconds(), float64(b.N)/tCreate.Seconds()
	b.StopTimer()
	dflt, err := bbolt.Open(filepath.Join(b.TempDir(), "default.db"), 0o600, &bbolt.Options{FreelistType: bbolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	defer dflt.Close()
	n := max(b.N/rounds, 1)
	tDefault := run(b.N, b.N+n, func(i int) error { return dflt.Batch(rawOp(i)) })
	b.ReportMetric(float64(n)/tDefault.Seconds(), "batch-default/s")
	b.ReportMetric(creates, "creates/s")
	b.ReportMetric(ceiling, "ceiling/s")
	b.ReportMetric(creates/ceiling, "ratio")
	b.ReportMetric(float64(len(writes)), "writes/create")
	b.ReportMetric(0, "ns/op")
}
