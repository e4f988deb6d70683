package agents_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// timed wraps a runtime and records, per turn, when the scheduler called it
// and when the agent process first spoke.
type timed struct {
	inner agents.Runtime
	mu    sync.Mutex
	run   map[string]time.Time
	first map[string]time.Time
}

func (x *timed) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	x.mu.Lock()
	x.run[t.RequestID] = time.Now()
	x.mu.Unlock()
	return x.inner.Run(ctx, t, &firstSink{Sink: sink, x: x, id: t.RequestID})
}

type firstSink struct {
	agents.Sink
	x  *timed
	id string
}

func (s *firstSink) Session(ctx context.Context, id string) error {
	s.x.mu.Lock()
	if _, ok := s.x.first[s.id]; !ok {
		s.x.first[s.id] = time.Now()
	}
	s.x.mu.Unlock()
	return s.Sink.Session(ctx, id)
}

// BenchmarkApprovedToStart measures, one request at a time, the time from
// an approved request being committed to (dispatch) the scheduler handing
// it to the runtime and (agent) its agent process writing its first line.
// The agent is a shell script speaking the exec protocol.
func BenchmarkApprovedToStart(b *testing.B) {
	e := newBenchEnv(b)
	rt := &timed{run: map[string]time.Time{}, first: map[string]time.Time{},
		inner: &process.Runtime{Command: []string{"/bin/sh", "-c",
			`read turn; echo '{"type":"session","id":"s"}'; echo '{"type":"final","text":"ok"}'`}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = agents.NewScheduler(e.svc, e.th, nil, agents.Agent{Name: "coder", Runtime: rt}).Run(ctx) }()
	var dispatch, agent []time.Duration
	b.ResetTimer()
	for b.Loop() {
		r, err := e.svc.Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: alice, Text: "go"})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		e.waitDone(b, r.ID)
		rt.mu.Lock()
		dispatch = append(dispatch, rt.run[r.ID.String()].Sub(t0))
		agent = append(agent, rt.first[r.ID.String()].Sub(t0))
		rt.mu.Unlock()
	}
	b.StopTimer()
	report(b, "dispatch", dispatch)
	report(b, "agent", agent)
}

func report(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), name+"-p50-ms")
	b.ReportMetric(q(0.99), name+"-p99-ms")
}

// BenchmarkNextTx: what an agent's worker reads to find its next request,
// with 100 and 1,000 requests queued over 50 agents. It reads one index
// entry whatever the length of the queue (entries/op).
func BenchmarkNextTx(b *testing.B) {
	for _, queued := range []int{100, 1000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			e := newBenchEnv(b)
			e.fill(b, queued, 50)
			var entries int
			i := 0
			for b.Loop() {
				agent := fmt.Sprintf("a%02d", i%50)
				i++
				err := e.db.View(context.Background(), func(tx store.Tx) error {
					ct := &countingTx{Tx: tx}
					r, err := e.svc.NextTx(ct, agent)
					if err == nil && r == nil {
						err = fmt.Errorf("no request for %s", agent)
					}
					entries += ct.entries
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(entries)/float64(b.N), "entries/op")
		})
	}
}

// BenchmarkDispatch drains 100 and 1,000 requests queued over 50 agents
// through the real scheduler (a runtime that answers at once): the time per
// request must not grow with the queue.
func BenchmarkDispatch(b *testing.B) {
	for _, queued := range []int{100, 1000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				e := newBenchEnv(b)
				ids := e.fill(b, queued, 50)
				var ags []agents.Agent
				for a := range 50 {
					ags = append(ags, agents.Agent{Name: fmt.Sprintf("a%02d", a), Runtime: instant{}})
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				b.StartTimer()
				t0 := time.Now()
				go func() {
					defer close(done)
					_ = agents.NewScheduler(e.svc, e.th, nil, ags...).Run(ctx)
				}()
				for _, id := range ids {
					e.waitDone(b, id)
				}
				total += time.Since(t0)
				b.StopTimer()
				cancel()
				<-done
				_ = e.db.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N*queued), "µs/request")
		})
	}
}

// instant is a runtime that answers at once.
type instant struct{}

func (instant) Run(context.Context, agents.Turn, agents.Sink) (agents.Outcome, error) {
	return agents.Outcome{Final: "ok"}, nil
}

// benchEnv is the real core on a bolt file, for benchmarks.
type benchEnv struct {
	db  *bolt.DB
	svc *requests.Service
	th  *threads.Threads
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	var names []string
	for a := range 50 {
		names = append(names, fmt.Sprintf("a%02d", a))
	}
	rs := []config.Room{{Name: "main", Console: true, Agents: append(names, "coder")}}
	svc := requests.NewService(db, clock.Real{}, "acme", []string{alice})
	th := threads.New(directory.New(rs, []string{alice}, chat.Console))
	svc.AddObserver("threads", th.Observe)
	return &benchEnv{db: db, svc: svc, th: th}
}

// fill queues n approved requests, round robin over agents a00...
func (e *benchEnv) fill(b *testing.B, n, agentCount int) []requests.ID {
	b.Helper()
	var ids []requests.ID
	for i := 0; i < n; i += 100 {
		err := e.db.Update(context.Background(), func(tx store.Tx) error {
			ids = ids[:i]
			for j := i; j < min(i+100, n); j++ {
				r, err := e.svc.CreateTx(tx, requests.Ask{Agent: fmt.Sprintf("a%02d", j%agentCount), Room: "main",
					Surface: chat.Console, User: alice, Text: "go"})
				if err != nil {
					return err
				}
				ids = append(ids, r.ID)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// waitDone waits until request id is done.
func (e *benchEnv) waitDone(b *testing.B, id requests.ID) {
	wake, unsub := e.db.Subscribe(requests.TopicRequests)
	defer unsub()
	deadline := time.After(30 * time.Second)
	for {
		r, err := e.svc.Get(context.Background(), id)
		if err != nil {
			b.Fatal(err)
		}
		if r.State == requests.Done {
			return
		}
		if r.State.Terminal() {
			b.Fatalf("%s ended %s: %s", id, r.State, r.Reason)
		}
		select {
		case <-wake:
		case <-deadline:
			b.Fatalf("%s not done within 30s", id)
		}
	}
}

// countingTx counts the index entries a read visits.
type countingTx struct {
	store.Tx
	entries int
}

func (c *countingTx) Scan(bucket, from, to string, fn func(string, []byte) error) error {
	return c.Tx.Scan(bucket, from, to, func(k string, v []byte) error {
		c.entries++
		return fn(k, v)
	})
}
