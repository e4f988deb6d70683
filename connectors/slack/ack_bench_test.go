package slack_test

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// ackRate is the load of BenchmarkAckLatency: events per second.
const ackRate = 200

// BenchmarkAckLatency measures how long Slack waits for its acknowledgement
// (request in → HTTP 200; envelope sent → ack received, on the fake's clock)
// while events arrive at 200 per second on loopback, each a member's mention
// that the real core turns into a pending request with its parent, approval
// card and DM posted through the outbox meanwhile. The ack waits for the
// core's Handle (the request committed to the bolt file), so this is also the
// latency of the store's commit under that load. Each iteration is one
// event; run with -benchtime=2000x for 10 s of load. It reports p50, p99 and
// max in ms.
func BenchmarkAckLatency(b *testing.B) {
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			h := newHarness(b, fast(setup{mode: mode, conn: func(o *slack.Options) { o.Queue = 1 << 16 }}))
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
						req, _ := http.NewRequest(http.MethodPost, h.web.URL+"/slack/events", bytes.NewReader(bodies[i]))
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
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
