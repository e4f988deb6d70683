package metrics_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/metrics"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// benchDir holds the fixtures benchmarks share (removed by TestMain).
var benchDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		_ = os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// BenchmarkCreate measures what the metrics observer costs a request's
// creation (one per transaction, as an ask is), without and with it: with
// fsync, as deployed, and without (NoSync: the CPU cost alone shows).
func BenchmarkCreate(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, observe := range []bool{false, true} {
			b.Run(fmt.Sprintf("fsync=%v/metrics=%v", sync, observe), func(b *testing.B) {
				bb := open(b, filepath.Join(b.TempDir(), "bridge.db"), observe)
				bb.db.Bolt().NoSync = !sync
				ctx := context.Background()
				a := ask("coder", member)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := bb.svc.Create(ctx, a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCreateRatio alternates creations on two stores, without and with
// the observer, timing each, so that the load of a noisy machine falls on
// both alike; it reports both means and their ratio.
func BenchmarkCreateRatio(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			var stores [2]*bridge
			for i, observe := range []bool{false, true} {
				stores[i] = open(b, filepath.Join(b.TempDir(), fmt.Sprintf("bridge%d.db", i)), observe)
				stores[i].db.Bolt().NoSync = !sync
			}
			ctx := context.Background()
			a := ask("coder", member)
			var took [2]time.Duration
			b.ResetTimer()
			for n := range b.N {
				for j := range 2 {
					i := (n + j) % 2 // who goes first alternates too
					start := time.Now()
					if _, err := stores[i].svc.Create(ctx, a); err != nil {
						b.Fatal(err)
					}
					took[i] += time.Since(start)
				}
			}
			b.ReportMetric(float64(took[0].Microseconds())/float64(b.N), "µs/create")
			b.ReportMetric(float64(took[1].Microseconds())/float64(b.N), "µs/create-metrics")
			b.ReportMetric(float64(took[1])/float64(took[0]), "ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkCreateParallel is BenchmarkCreate with fsync from 8 concurrent
// submitters (the store group-commits them: the observer's page writes are
// shared by a batch).
func BenchmarkCreateParallel(b *testing.B) {
	for _, observe := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", observe), func(b *testing.B) {
			bb := open(b, filepath.Join(b.TempDir(), "bridge.db"), observe)
			ctx := context.Background()
			a := ask("coder", member)
			b.SetParallelism(4) // 8 submitters on 2 CPUs
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := bb.svc.Create(ctx, a); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkTransition is BenchmarkCreate's CPU case for a transition
// (approve): three counter writes with the observer.
func BenchmarkTransition(b *testing.B) {
	for _, observe := range []bool{false, true} {
		b.Run(fmt.Sprintf("fsync=false/metrics=%v", observe), func(b *testing.B) {
			bb := open(b, filepath.Join(b.TempDir(), "bridge.db"), observe)
			bb.db.Bolt().NoSync = true
			ctx := context.Background()
			ids := make([]requests.ID, 0, b.N)
			for i := 0; i < b.N; i += 100 {
				if err := bb.db.Update(ctx, func(tx store.Tx) error {
					for range min(100, b.N-i) {
						r, err := bb.svc.CreateTx(tx, ask("coder", member))
						if err != nil {
							return err
						}
						ids = append(ids, r.ID)
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for _, id := range ids {
				if _, err := bb.svc.Apply(ctx, id, requests.Change{Event: requests.Approve, Actor: ownerUser}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var (
	bigOnce sync.Once
	bigPath string
	bigErr  error
)

// bigStore makes, once, a store of 100,000 requests of 4 agents spread over
// every state, written with the metrics observer.
func bigStore(b *testing.B) string {
	bigOnce.Do(func() {
		if benchDir, bigErr = os.MkdirTemp("", "metrics-bench-"); bigErr != nil {
			return
		}
		bigPath = filepath.Join(benchDir, "bridge.db")
		db, err := bolt.Open(bigPath)
		if err != nil {
			bigErr = err
			return
		}
		defer db.Close()
		svc := requests.NewService(db, clock.NewFake(day0), owner, []string{ownerUser})
		m, err := metrics.New(context.Background(), metrics.Options{Requests: svc, NoRuntime: true})
		if err != nil {
			bigErr = err
			return
		}
		svc.AddObserver("metrics", m.Observe)
		if bigErr = m.IndexRequests(context.Background()); bigErr != nil {
			return
		}
		paths := [][]requests.Event{
			{}, {requests.Approve}, {requests.Approve, requests.Start},
			{requests.Approve, requests.Start, requests.Finish}, {requests.Approve, requests.Start, requests.Fail},
			{requests.Cancel}, {requests.Expire},
		}
		agents := []string{"coder", "reviewer", "writer", "tester"}
		for i := 0; i < 100_000 && bigErr == nil; i += 500 {
			bigErr = db.Update(context.Background(), func(tx store.Tx) error {
				for j := range 500 {
					n := i + j
					r, err := svc.CreateTx(tx, ask(agents[n%len(agents)], member))
					if err != nil {
						return err
					}
					for _, ev := range paths[n%len(paths)] {
						if _, err := svc.ApplyTx(tx, r.ID, requests.Change{Event: ev, Actor: ownerUser}); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigPath
}

// BenchmarkScrape100k is one scrape of the metrics of a store of 100,000
// requests: indexed (the counters Observe keeps), and not indexed yet (the
// scrape counts the requests themselves).
func BenchmarkScrape100k(b *testing.B) {
	path := bigStore(b)
	for _, indexed := range []bool{true, false} {
		b.Run(fmt.Sprintf("indexed=%v", indexed), func(b *testing.B) {
			// A copy: the unindexed case drops the marker.
			p := filepath.Join(b.TempDir(), "bridge.db")
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o600); err != nil {
				b.Fatal(err)
			}
			bb := open(b, p, false)
			if !indexed {
				if err := bb.db.Update(context.Background(), func(tx store.Tx) error {
					return tx.Delete("metrics", "requests/"+owner)
				}); err != nil {
					b.Fatal(err)
				}
			}
			got := scrape(b, bb.m)
			if n := got["roombridge_requests{agent=coder,state=done}"]; n < 3000 {
				b.Fatalf("coder's done requests: %v", n)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := bb.m.Registry().Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIndexRequests100k is the one-time counting, in one transaction,
// of a store of 100,000 requests written without the observer's index.
func BenchmarkIndexRequests100k(b *testing.B) {
	path := bigStore(b)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		b.StopTimer()
		p := filepath.Join(b.TempDir(), "bridge.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
		bb := open(b, p, false)
		if err := bb.db.Update(context.Background(), func(tx store.Tx) error {
			return tx.Delete("metrics", "requests/"+owner)
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := bb.m.IndexRequests(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
