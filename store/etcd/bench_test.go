package etcd_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"github.com/roombridge/roombridge/threads"
)

// BenchmarkRequestCreate creates requests through the real service (request,
// indexes, audit record and thread effect in one transaction) on bolt and on
// etcd (one embedded member, loopback, fsync on, every Txn fenced by a live
// election), sequentially and from 16 goroutines. It reports throughput
// (creates/s) and latency percentiles.
//
//	go test -run '^$' -bench RequestCreate -benchtime 2000x ./store/etcd/
func BenchmarkRequestCreate(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"bolt", func(b *testing.B) store.Store {
			s, err := bolt.Open(filepath.Join(b.TempDir(), "bridge.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"etcd", func(b *testing.B) store.Store {
			srv := etcdtest.Start(b)
			cli := srv.Client(b)
			l, err := election.New(election.Options{Client: cli, Prefix: "/bench/leader", TTL: 5 * time.Second, Name: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			leading := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = l.Run(ctx, func(ctx context.Context) error { close(leading); <-ctx.Done(); return nil })
			}()
			b.Cleanup(func() { cancel(); <-done })
			<-leading
			s, err := etcd.New(cli, etcd.Options{Prefix: "/bench/store", Fence: l})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
	rooms := []config.Room{{Name: "main", Console: true, Agents: []string{"coder"}}}
	for _, be := range backends {
		for _, workers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", be.name, workers), func(b *testing.B) {
				s := be.open(b)
				svc := requests.NewService(s, clock.Real{}, "acme", []string{"console:alice"})
				svc.AddObserver("threads", threads.New(directory.New(rooms, []string{"console:alice"}, chat.Console)).Observe)
				lat := make([]time.Duration, b.N)
				var next sync.Mutex
				i := 0
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							next.Lock()
							n := i
							i++
							next.Unlock()
							if n >= b.N {
								return
							}
							t0 := time.Now()
							if _, err := svc.Create(context.Background(), requests.Ask{
								Agent: "coder", Room: "main", Surface: chat.Console, User: "console:alice", Text: "say hi",
							}); err != nil {
								b.Error(err)
								return
							}
							lat[n] = time.Since(t0)
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}
