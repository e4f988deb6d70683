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
	clientv3 "go.etcd.io/etcd/client/v3"
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

// recorder records the writes of a store's Updates (keys and value sizes),
// for the raw ceiling to write what a creation writes.
type recorder struct {
	store.Store
	mu     sync.Mutex
	writes map[string]int
}

type recordingTx struct {
	store.Tx
	r *recorder
}

func (t recordingTx) Put(bucket, key string, v []byte) error {
	t.r.mu.Lock()
	t.r.writes[bucket+"/"+key] = len(v)
	t.r.mu.Unlock()
	return t.Tx.Put(bucket, key, v)
}

func (r *recorder) Update(ctx context.Context, fn func(store.Tx) error) error {
	return r.Store.Update(ctx, func(tx store.Tx) error { return fn(recordingTx{tx, r}) })
}

// BenchmarkCreateVsFencedTxn runs, side by side (ten alternating rounds),
// 16 concurrent submitters of Create (with the thread observer) on etcd
// (one embedded member, loopback, fenced) and two raw ceilings: 16
// goroutines each committing fenced Txns that put the keys and value sizes
// one creation writes (recorded from a real one), and 16 goroutines of
// small fenced Txns (one 64-byte put: the "raw fenced Txns").
// Creations are made as the bridge makes them: each with its platform
// event key (deduped), under the default queue limit, spread over 64
// agents. ratio is creations/s over the same-keys ceiling's, ratio-small
// over the small Txns'.
func BenchmarkCreateVsFencedTxn(b *testing.B) {
	const workers = 16
	srv := etcdtest.Start(b)
	cli := srv.Client(b)
	l, err := election.New(election.Options{Client: cli, Prefix: "/bench/leader", TTL: 5 * time.Second, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leading, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx, func(ctx context.Context) error { close(leading); <-ctx.Done(); return nil })
	}()
	defer func() { cancel(); <-done }()
	<-leading
	s, err := etcd.New(cli, etcd.Options{Prefix: "/bench/store", Fence: l})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const agents = 64
	var names []string
	for i := range agents {
		names = append(names, fmt.Sprintf("coder%d", i))
	}
	rooms := []config.Room{{Name: "main", Console: true, Agents: names}}
	observe := threads.New(directory.New(rooms, []string{"console:alice"}, chat.Console)).Observe
	ask := func(i int) requests.Ask {
		return requests.Ask{Agent: names[i%agents], Room: "main", Surface: chat.Console, User: "console:alice",
			Text: "say hi", EventKey: fmt.Sprintf("console:Ev%09d", i)}
	}
	newService := func(st store.Store) *requests.Service {
		svc := requests.NewService(st, clock.Real{}, "acme", []string{"console:alice"})
		svc.SetQueueLimit(config.DefaultQueueLimit)
		svc.AddObserver("threads", observe)
		return svc
	}
	rec := &recorder{Store: s, writes: map[string]int{}}
	if _, err := newService(rec).Create(ctx, ask(1<<30)); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 0, len(rec.writes))
	for k, n := range rec.writes {
		keys = append(keys, fmt.Sprintf("%s (%d B)", k, n))
	}
	slices.Sort(keys)
	b.Logf("a creation writes %d keys: %v", len(keys), keys)
	svc := newService(s)
	fenceKey, fenceRev, ok := l.Term()
	if !ok {
		b.Fatal("not leading")
	}
	raw := func(i int) error {
		ops := make([]clientv3.Op, 0, len(rec.writes))
		for k, n := range rec.writes {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/bench/raw/%s/%d", k, i), string(make([]byte, n))))
		}
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(fenceKey), "=", fenceRev)).Then(ops...).Commit()
		if err == nil && !resp.Succeeded {
			err = store.ErrFenced
		}
		return err
	}
	small := func(i int) error {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(fenceKey), "=", fenceRev)).
			Then(clientv3.OpPut(fmt.Sprintf("/bench/small/%09d", i), string(make([]byte, 64)))).Commit()
		if err == nil && !resp.Succeeded {
			err = store.ErrFenced
		}
		return err
	}
	create := func(i int) error { _, err := svc.Create(ctx, ask(i)); return err }
	run := func(from, to int, op func(int) error) time.Duration {
		var next sync.Mutex
		i := from
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for {
					next.Lock()
					n := i
					i++
					next.Unlock()
					if n >= to {
						return
					}
					if err := op(n); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	const rounds = 10
	var tRaw, tSmall, tCreate time.Duration
	b.ResetTimer()
	for r := range rounds {
		from, to := b.N*r/rounds, b.N*(r+1)/rounds
		tRaw += run(from, to, raw)
		tSmall += run(from, to, small)
		tCreate += run(from, to, create)
	}
	b.StopTimer()
	creates, ceiling, smallCeiling := float64(b.N)/tCreate.Seconds(), float64(b.N)/tRaw.Seconds(), float64(b.N)/tSmall.Seconds()
	b.ReportMetric(creates, "creates/s")
	b.ReportMetric(ceiling, "ceiling/s")
	b.ReportMetric(creates/ceiling, "ratio")
	b.ReportMetric(smallCeiling, "small-txn/s")
	b.ReportMetric(creates/smallCeiling, "ratio-small")
	b.ReportMetric(float64(len(rec.writes)), "writes/create")
	b.ReportMetric(0, "ns/op")
}
