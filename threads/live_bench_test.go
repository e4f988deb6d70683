package threads_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// countingStore is the real store, counting its write transactions.
type countingStore struct {
	store.Store
	writes atomic.Int64
}

func (c *countingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	c.writes.Add(1)
	return c.Store.Update(ctx, fn)
}

// pacedStreamer is a fake streaming surface of a given pace that records
// when (on the injected clock) each update reached it.
type pacedStreamer struct {
	*streamer
	pace time.Duration
	clk  clock.Clock
	mu   sync.Mutex
	at   []time.Time
}

func (p *pacedStreamer) StreamPace() time.Duration { return p.pace }

func (p *pacedStreamer) AppendStream(ctx context.Context, ref chat.MessageRef, u chat.StreamUpdate) error {
	p.mu.Lock()
	p.at = append(p.at, p.clk.Now())
	p.mu.Unlock()
	return p.streamer.AppendStream(ctx, ref, u)
}

// last is how many updates were shown, and when the last was.
func (p *pacedStreamer) last() (int, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.at) == 0 {
		return 0, time.Time{}
	}
	return len(p.at), p.at[len(p.at)-1]
}

// maxPerSecond is the most updates in any one second of virtual time.
func (p *pacedStreamer) maxPerSecond() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	most := 0
	for i := range p.at {
		n := 0
		for j := i; j < len(p.at) && p.at[j].Sub(p.at[i]) < time.Second; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// BenchmarkLiveAnswer60s: an answer of 20,000 characters written as 4,000
// deltas over 60 s of virtual time (an injected clock, 15 ms a delta) into
// a surface of Slack's pace (500 ms) and one of Feishu CardKit's (200 ms).
// It reports the most updates in any second, the updates in all, and the
// store writes per delta (the live message's record is the one write).
func BenchmarkLiveAnswer60s(b *testing.B) {
	for _, surface := range []struct {
		name string
		pace time.Duration
	}{{"slack", 500 * time.Millisecond}, {"feishu", 200 * time.Millisecond}} {
		b.Run(surface.name, func(b *testing.B) {
			for b.Loop() {
				f, s, r := liveFixture(b)
				cs := &countingStore{Store: f.db}
				p := &pacedStreamer{streamer: s, pace: surface.pace, clk: f.clk}
				l := threads.NewLive(f.th, cs, f.clk, nil, p)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); _ = l.Run(ctx) }()
				waitFor(b, "live running", l.Running)
				chunk := strings.Repeat("x", 4) + " "
				for range 4000 {
					l.Delta(r, chunk)
					f.clk.Advance(15 * time.Millisecond)
					// In real time the sender has 15 ms for each delta: let
					// it catch up whenever an update is due.
					if n, last := p.last(); n == 0 || f.clk.Now().Sub(last) >= surface.pace {
						waitFor(b, "the due update", func() bool { m, _ := p.last(); return m > n })
					}
				}
				waitFor(b, "the last delta shown", func() bool {
					f.clk.Advance(time.Millisecond) // virtual time goes on while the sender catches up
					return len(s.live("live1")) == 20000
				})
				cancel()
				<-done
				b.ReportMetric(float64(p.maxPerSecond()), "max-updates/s")
				b.ReportMetric(float64(len(p.at)), "updates")
				b.ReportMetric(float64(cs.writes.Load())/4000, "store-writes/delta")
			}
		})
	}
}

// BenchmarkLiveDelta: the delta path (agents.Live.Delta into the
// coalescer) on one goroutine, its sender showing at a 500 ms pace.
func BenchmarkLiveDelta(b *testing.B) {
	f, s, r := liveFixture(b)
	d := &discarding{streamer: s}
	l, stop := startLive(b, f, d)
	defer stop()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		l.Delta(r, "word ")
		if n++; n%65536 == 0 {
			l.Said(r) // a new segment now and then: the text stays bounded
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deltas/s")
}

// discarding is a streaming surface of Slack's pace that keeps nothing.
type discarding struct {
	*streamer
	n atomic.Int64
}

func (d *discarding) StreamPace() time.Duration { return 500 * time.Millisecond }

func (d *discarding) AppendStream(context.Context, chat.MessageRef, chat.StreamUpdate) error {
	d.n.Add(1)
	return nil
}
