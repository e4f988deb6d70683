package requests_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
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
