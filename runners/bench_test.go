package runners_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/runners"
	"github.com/roombridge/roombridge/store/bolt"
)

// instant is an agent that reports n messages and answers at once: what
// remains of a turn is the runner's dispatch.
type instant struct{ n int }

func (a instant) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	for i := 0; i < a.n; i++ {
		_ = sink.Message(ctx, "m")
	}
	return agents.Outcome{Final: "ok"}, nil
}

type nopSink struct{}

func (nopSink) Session(context.Context, string) error                  { return nil }
func (nopSink) Tool(context.Context, string, string) error             { return nil }
func (nopSink) Progress(context.Context, int, string) error            { return nil }
func (nopSink) Message(context.Context, string) error                  { return nil }
func (nopSink) Call(context.Context, agents.TurnEvent) agents.Response { return agents.Response{} }

// benchHub serves a hub on loopback with n runners of 3 agents each
// connected (agent a<i>-<j> on runner r<i>), each agent reporting events
// messages a turn.
func benchHub(b *testing.B, n, events int) *runners.Hub {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	hosts := map[string]string{}
	for i := range n {
		for j := range 3 {
			hosts[fmt.Sprintf("a%d-%d", i, j)] = fmt.Sprintf("r%d", i)
		}
	}
	hub := runners.NewHub(runners.HubOptions{Store: db, Hosts: hosts})
	srv := httptest.NewUnstartedServer(hub.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = hub.Run(ctx); close(done) }()
	var waits []chan struct{}
	for i := range n {
		name := fmt.Sprintf("r%d", i)
		tok, err := runners.Add(ctx, db, time.Now(), name)
		if err != nil {
			b.Fatal(err)
		}
		ags := map[string]agents.Runtime{}
		for j := range 3 {
			ags[fmt.Sprintf("a%d-%d", i, j)] = instant{events}
		}
		r, err := runners.NewRunner(runners.RunnerOptions{Name: name, URLs: []string{srv.URL}, Token: tok, Agents: ags})
		if err != nil {
			b.Fatal(err)
		}
		w := make(chan struct{})
		waits = append(waits, w)
		go func() { _ = r.Run(ctx); close(w) }()
	}
	b.Cleanup(func() {
		cancel()
		<-done
		for _, w := range waits {
			<-w
		}
		srv.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _ := hub.Statuses(ctx)
		up := 0
		for _, s := range st {
			if s.Connected {
				up++
			}
		}
		if up == n {
			return hub
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runners connected", up, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkDispatch is one turn sent to a runner on loopback and its end
// back (p50 reported), with 0 or 100 events streamed back.
func BenchmarkDispatch(b *testing.B) {
	for _, events := range []int{0, 100} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			hub := benchHub(b, 1, events)
			rt := hub.Runtime("a0-0")
			ctx := context.Background()
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				turn := agents.Turn{RequestID: fmt.Sprintf("R-%d", i), Agent: "a0-0", Number: 1}
				if _, err := rt.Run(ctx, turn, nopSink{}); err != nil {
					b.Fatal(err)
				}
				rt.Settled(ctx, turn) // as the scheduler does once the end is recorded
				lat = append(lat, time.Since(start))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			p50 := lat[len(lat)/2]
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			if events > 0 {
				b.ReportMetric(float64(p50.Microseconds())/1000/float64(events), "ms/event")
			}
		})
	}
}

// BenchmarkIdleRunners connects 100 runners × 3 agents and measures the
// process's CPU (both sides: an upper bound on the bridge's) and the heap
// they take while idle for 10 s (heartbeats every 5 s).
func BenchmarkIdleRunners(b *testing.B) {
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		benchHub(b, 100, 0)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		cpu0 := cpuTime()
		idle := 10 * time.Second
		time.Sleep(idle) // measuring idleness: there is no state to wait for
		cpu := cpuTime() - cpu0
		b.ReportMetric(100*cpu.Seconds()/idle.Seconds(), "cpu-%-of-core")
		b.ReportMetric(float64(after.HeapInuse-min(after.HeapInuse, before.HeapInuse))/(1<<20), "heap-MB")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
