package slack_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// ackRate is the load of BenchmarkAckLatency: events per second.
const ackRate = 200

// BenchmarkAckLatency measures how long Slack waits for its acknowledgement
// (request in → HTTP 200; envelope sent → ack received, on the fake's clock)
// while events arrive at 200 per second on loopback, each a member's mention
// that the real core turns into a pending request with its parent, approval
// card and DM posted through the outbox meanwhile. Each iteration is one
// event; run with -benchtime=2000x for 10 s of load. It reports p50, p99 and
// max in ms.
//
// The ack waits for the core's Handle (the request committed to the bolt
// file). The mentions are all in one channel, so one worker hands them to
// the core one after the other (asks of a channel keep their order):
// handle-p50/p99 are the core's Handle alone, the rest of an ack's latency is
// waiting for that worker; late counts the events acknowledged when the ack
// budget ran out, before the core had stored them.
func BenchmarkAckLatency(b *testing.B) {
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			var hmu sync.Mutex
			var handle []time.Duration
			timed := func(core chat.Handler) chat.Handler {
				return chat.HandlerFunc(func(ctx context.Context, ev chat.Event) chat.Response {
					start := time.Now()
					defer func() {
						hmu.Lock()
						handle = append(handle, time.Since(start))
						hmu.Unlock()
					}()
					return core.Handle(ctx, ev)
				})
			}
			h := newHarness(b, fast(setup{mode: mode, handler: timed, conn: func(o *slack.Options) { o.Queue = 1 << 16 }}))
			bodies := make([][]byte, b.N)
			for i := range bodies {
				raw := fmt.Sprintf("<@%s> coder echo %d", slacktest.BotUserID, i)
				ts, err := h.fake.AddUserMessage(channel, member, raw, "")
				if err != nil {
					b.Fatal(err)
				}
				bodies[i] = slacktest.AppMentionEvent(fmt.Sprintf("EvB%07d", i), channel, member, raw, ts, "")
			}
			h.mention(member, "coder echo warm-up") // the connector runs
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			tick := time.NewTicker(time.Second / ackRate)
			defer tick.Stop()
			b.ResetTimer()
			for i := range b.N {
				<-tick.C
				wg.Go(func() {
					if mode == slack.ModeEvents {
						req, _ := http.NewRequest(http.MethodPost, h.bridge.URL+"/slack/events", bytes.NewReader(bodies[i]))
						req.Header.Set("Content-Type", "application/json")
						slacktest.SignRequest(req, bodies[i], secret, time.Now())
						start := time.Now()
						resp, err := http.DefaultClient.Do(req)
						lat[i] = time.Since(start)
						if err != nil || resp.StatusCode != http.StatusOK {
							b.Errorf("event %d: %v %v", i, err, resp)
							return
						}
						resp.Body.Close()
						return
					}
					if _, err := h.fake.PushEventsAPI(h.ctx(), bodies[i]); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			if mode == slack.ModeSocket {
				if err := h.fake.WaitFor(h.ctx(), func(s *slacktest.Server) bool {
					for _, e := range s.Envelopes() {
						if e.Acks == 0 {
							return false
						}
					}
					return true
				}); err != nil {
					b.Fatal(err)
				}
				lat = lat[:0]
				for _, e := range h.fake.Envelopes()[1:] { // after the warm-up
					lat = append(lat, e.Latency())
				}
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			slices.Sort(lat)
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			hmu.Lock()
			slices.Sort(handle)
			b.ReportMetric(ms(handle[len(handle)/2]), "handle-p50-ms")
			b.ReportMetric(ms(handle[len(handle)*99/100]), "handle-p99-ms")
			hmu.Unlock()
			b.ReportMetric(float64(strings.Count(h.logs.String(), "ack budget ran out")), "late")
			b.ReportMetric(0, "ns/op")
		})
	}
}
