package slack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// burstEvery is BenchmarkBurst50's channel pace: Slack's one post per
// second per channel, ten times faster (figures are in spacings).
const burstEvery = 100 * time.Millisecond

// BenchmarkBurst50: 50 owners' asks arrive at once in one channel, each to
// its own agent, which answers after 2 s (20 spacings, while the parents
// are still going out); the channel takes one post per
// burstEvery (the fake's limit, the connector's spacing). Every thread
// needs its parent and its answer posted: 100 posts at the channel's pace.
// It reports, in spacings (multiples of burstEvery), how long after its
// agent gave it the first answer was posted, the median and the last
// (answer-delay-*), and when the last parent was posted after the burst
// began (last-parent): answers go ahead of the other threads' new parents,
// so an answer never waits behind all of them, and the parents still go
// out at the channel's pace. 429s must stay 0.
func BenchmarkBurst50(b *testing.B) {
	for range b.N {
		var names []string
		for i := range 50 {
			names = append(names, fmt.Sprintf("a%d", i))
		}
		h := newHarness(b, setup{mode: "events", agents: names,
			fake: []slacktest.Option{slacktest.PostMessageLimit(burstEvery, slacktest.DefaultPostBurst), slacktest.UpdateLimit(5*time.Millisecond, 50)},
			conn: func(o *slack.Options) {
				o.PostSpacing, o.UpdateEvery, o.UpdateBurst = burstEvery, 6*time.Millisecond, 40
			}})
		began := time.Now()
		for i, a := range names {
			h.mention(owner, fmt.Sprintf("%s sleep 2s; echo burst-%d-done", a, i))
		}
		h.waitStore("the 50 answers given and posted", func() bool {
			done := 0
			for _, r := range h.requests() {
				if r.State == requests.Done {
					done++
				}
			}
			return done == 50 && h.outboxEmpty()
		})
		posted := map[string]time.Time{} // answer text → when it was posted
		var lastParent time.Time
		for _, m := range h.fake.Messages() {
			if m.User != slacktest.BotUserID || m.Channel != channel {
				continue
			}
			at := tsTime(b, m.TS)
			switch {
			case m.ThreadTS == "":
				if at.After(lastParent) {
					lastParent = at
				}
			case strings.HasPrefix(m.Text, "burst-"):
				posted[m.Text] = at
			}
		}
		var delays []time.Duration
		for _, r := range h.requests() {
			at, ok := posted[r.Result]
			if !ok {
				b.Fatalf("%s's answer %q was not posted", r.ID, r.Result)
			}
			delays = append(delays, at.Sub(r.EndedAt))
		}
		slices.Sort(delays)
		if n := h.fake.RateLimited("chat.postMessage"); n != 0 {
			b.Errorf("%d posts answered 429", n)
		}
		spacings := func(d time.Duration) float64 { return float64(d) / float64(burstEvery) }
		b.ReportMetric(spacings(delays[0]), "answer-delay-first")
		b.ReportMetric(spacings(delays[len(delays)/2]), "answer-delay-median")
		b.ReportMetric(spacings(delays[len(delays)-1]), "answer-delay-last")
		b.ReportMetric(spacings(lastParent.Sub(began)), "last-parent")
	}
}

// tsTime is when the fake posted the message of ts.
func tsTime(t testing.TB, ts string) time.Time {
	t.Helper()
	at, err := slacktest.TSTime(ts)
	if err != nil {
		t.Fatal(err)
	}
	return at
}
