package slack_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// ackLoad is one load of BenchmarkAckLatency.
type ackLoad struct {
	name     string
	rate     int  // events per second, spread round-robin over the channels
	channels int  // rooms, each on its own channel
	hog      bool // a busy-looping goroutine per core runs meanwhile
}

// ackPeople is how many people the benchmark's mentions come from, in
// turn: one person's events keep their order (one lane), different
// people's are handled side by side.
const ackPeople = 50

var ackLoads = []ackLoad{
	{name: "one-channel", rate: 200, channels: 1},
	{name: "one-channel-cpu-hog", rate: 200, channels: 1, hog: true},
	{name: "ten-channels", rate: 1000, channels: 10},
}

// BenchmarkAckLatency measures how long Slack waits for its acknowledgement
// (request in → HTTP 200; envelope sent → ack received, on the fake's clock)
// while events arrive at a steady rate on loopback, each a member's mention
// (ackPeople people in turn) that the real core turns into a pending
// request with its parent, approval card and DM posted through the outbox
// meanwhile. Each iteration is one event. Loads: one-channel (200 events/s into one channel; -benchtime=2000x
// is 10 s of load), one-channel-cpu-hog (the same while a goroutine per core,
// runtime.NumCPU of them, busy-loops in this process), ten-channels (1,000
// events/s over 10 channels). It reports p50, p99 and max in ms.
//
// The ack waits for the core's Handle (the request committed to the bolt
// file). Different people's top-level mentions need no order between them
// (each starts its own thread), so they are handled concurrently and share
// the store's group commit: handle-p50/p99 are the core's Handle alone, the rest of an ack's
// latency is waiting for a worker; late counts the events whose ack budget
// ran out before the core had stored them (left unacknowledged, for Slack to
// deliver again; in events mode they are refused too, a 503).
func BenchmarkAckLatency(b *testing.B) {
	for _, mode := range modes {
		for _, load := range ackLoads {
			b.Run(mode+"/"+load.name, func(b *testing.B) { benchAck(b, mode, load) })
		}
	}
}

func benchAck(b *testing.B, mode string, load ackLoad) {
	handle := &timings{}
	timed := func(core chat.Handler) chat.Handler {
		return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
			start := time.Now()
			defer func() { handle.add(time.Since(start)) }()
			return core.Handle(ctx, ev)
		})
	}
	chans := benchChannels(load.channels)
	h := newHarness(b, fast(setup{mode: mode, handler: timed, channels: chans[1:],
		conn: func(o *slack.Options) { o.Queue = 1 << 16 }}))
	bodies := make([][]byte, b.N)
	for i := range bodies {
		ch := chans[i%len(chans)]
		who := fmt.Sprintf("U%d", 100+i%ackPeople) // one person's events keep their order
		raw := fmt.Sprintf("<@%s> coder echo %d", slacktest.BotUserID, i)
		ts, err := h.fake.AddUserMessage(ch, who, raw, "")
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = slacktest.AppMentionEvent(fmt.Sprintf("EvB%07d", i), ch, who, raw, ts, "")
	}
	h.mention(member, "coder echo warm-up") // the connector runs
	if load.hog {
		defer hogCPUs()()
	}
	lat := make([]time.Duration, b.N)
	var refused atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(load.rate))
	defer tick.Stop()
	b.ResetTimer()
	for i := range b.N {
		<-tick.C
		wg.Go(func() {
			if mode == slack.ModeEvents {
				var ok bool
				if lat[i], ok = postTimed(h.bridge.URL+"/slack/events", bodies[i]); !ok {
					refused.Add(1)
				}
				return
			}
			if _, err := h.fake.PushEventsAPI(h.ctx(), bodies[i]); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	if mode == slack.ModeSocket {
		lat = socketLatencies(b, h)
	}
	b.StopTimer()
	reportAck(b, h, lat, handle)
	b.ReportMetric(float64(refused.Load()), "refused")
}

// benchChannels names n channels, the harness's own first.
func benchChannels(n int) []string {
	out := []string{channel}
	for i := 1; i < n; i++ {
		out = append(out, fmt.Sprintf("C%04d", 9000+i))
	}
	return out
}

// hogCPUs starts a busy-looping goroutine per core; the returned func stops
// them.
func hogCPUs() (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for n := 0; !done.Load(); n++ {
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// postTimed POSTs a signed Events API body and returns how long the answer
// took, and whether it was a 200. A request refused (the bridge's HTTP
// server takes at most 64 connections from one client: with acks slower
// than the arrivals, more are open) is counted, not fatal: Slack would
// deliver the event again.
func postTimed(url string, body []byte) (time.Duration, bool) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	slacktest.SignRequest(req, body, secret, time.Now())
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	took := time.Since(start)
	if err != nil {
		return took, false
	}
	resp.Body.Close()
	return took, resp.StatusCode == http.StatusOK
}

// socketLatencies waits until every envelope is acknowledged or left
// without its ack when its ack budget ran out (late: Slack would deliver it
// again), and returns their latencies, the warm-up's left out; a late one's
// is the budget, when the connector gave up on it.
func socketLatencies(b *testing.B, h *harness) []time.Duration {
	h.until("every envelope acknowledged or late", func() bool {
		late := h.lateEvents()
		for _, e := range h.fake.Envelopes() {
			if e.Acks == 0 && late[eventIDOf(b, e.Payload)] == 0 {
				return false
			}
		}
		return true
	})
	var lat []time.Duration
	for _, e := range h.fake.Envelopes()[1:] { // after the warm-up
		if e.Acks == 0 {
			lat = append(lat, slack.DefaultAckBudget)
			continue
		}
		lat = append(lat, e.Latency())
	}
	return lat
}

// timings collects the core's handling times.
type timings struct {
	mu sync.Mutex
	d  []time.Duration
}

func (t *timings) add(d time.Duration) {
	t.mu.Lock()
	t.d = append(t.d, d)
	t.mu.Unlock()
}

func reportAck(b *testing.B, h *harness, lat []time.Duration, handle *timings) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	handle.mu.Lock()
	slices.Sort(handle.d)
	b.ReportMetric(ms(handle.d[len(handle.d)/2]), "handle-p50-ms")
	b.ReportMetric(ms(handle.d[len(handle.d)*99/100]), "handle-p99-ms")
	handle.mu.Unlock()
	b.ReportMetric(float64(strings.Count(h.logs.String(), "ack budget ran out")), "late")
	b.ReportMetric(0, "ns/op")
}
