package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/ratelimit"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// postBurstEvery is BenchmarkPostBurst100's channel pace: Slack's one post
// per second per channel, fifty times faster; each call's round trip is a
// tenth of it (100 ms against Slack's 1 s) plus loopback's own.
const postBurstEvery = 20 * time.Millisecond

// BenchmarkPostBurst100: 100 posts want out at once into one channel of a
// fake Slack that takes one post per postBurstEvery with the short burst
// Slack tolerates (slacktest.DefaultPostBurst). from=start is the
// connector's spacing (from the previous post's start, with a floor after
// its end); from=end is the spacing from the previous post's end that it
// replaced, in the same run. It reports, in intervals (multiples of
// postBurstEvery), the platform's time: from the first post's arrival to
// the last's, plus the one interval the last takes (100 posts at exactly
// the channel's pace take 100), the wall time from the burst's start to
// the last answer, the mean round trip of a post as the connector saw it
// (the fake's tenth of an interval, loopback and the machine's load: the
// floor after an answer adds to the pace once a post's round trip and
// its start's lateness pass a third of an interval), and the 429s (must be
// 0: an error).
func BenchmarkPostBurst100(b *testing.B) {
	for _, c := range []struct {
		name   string
		spacer func() *ratelimit.Spacer // nil: the connector's own
	}{
		{"from=end", func() *ratelimit.Spacer { return ratelimit.NewSpacer(postBurstEvery) }},
		{"from=start", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			var platform, wall, rtt time.Duration
			limited := 0
			for range b.N {
				r := postBurst(b, 100, c.spacer)
				platform, wall, rtt, limited = platform+r.platform, wall+r.wall, rtt+r.rtt, limited+r.limited
			}
			if limited != 0 {
				b.Errorf("%d posts answered 429", limited)
			}
			in := func(d time.Duration) float64 { return float64(d) / float64(b.N) / float64(postBurstEvery) }
			b.ReportMetric(in(platform), "platform-intervals")
			b.ReportMetric(in(wall), "wall-intervals")
			b.ReportMetric(in(rtt), "rtt-intervals")
			b.ReportMetric(float64(limited)/float64(b.N), "429s")
		})
	}
}

// burstResult is what postBurst measured.
type burstResult struct {
	platform time.Duration // first arrival to last, plus one interval
	wall     time.Duration // the burst's start to the last answer
	rtt      time.Duration // a post's mean round trip
	limited  int           // 429s
}

// timedWay measures the round trips of the requests it carries.
type timedWay struct {
	mu    sync.Mutex
	total time.Duration
	n     int
}

func (w *timedWay) RoundTrip(r *http.Request) (*http.Response, error) {
	began := time.Now()
	resp, err := http.DefaultTransport.RoundTrip(r)
	w.mu.Lock()
	w.total += time.Since(began)
	w.n++
	w.mu.Unlock()
	return resp, err
}

// postBurst posts n messages at once into one channel of a new fake Slack.
func postBurst(b *testing.B, n int, spacer func() *ratelimit.Spacer) burstResult {
	way := &timedWay{}
	fake := slacktest.NewServer(slacktest.PostMessageLimit(postBurstEvery, slacktest.DefaultPostBurst),
		slacktest.RoundTrip(postBurstEvery/10))
	defer fake.Close()
	conn, err := New(Options{Mode: ModeEvents, BotToken: slacktest.DefaultBotToken, SigningSecret: "s",
		APIURL: fake.APIURL(), PostSpacing: postBurstEvery, HTTPClient: &http.Client{Transport: way}})
	if err != nil {
		b.Fatal(err)
	}
	if spacer != nil {
		conn.posts = spacer()
	}
	ctx := context.Background()
	began := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, err := conn.StartThread(ctx, "C1", chat.Message{Text: fmt.Sprintf("post %d", i)})
			if _, ok := errors.AsType[*chat.RetryAfterError](err); err != nil && !ok {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	wall := time.Since(began)
	msgs := fake.Messages()
	if len(msgs) == 0 {
		b.Fatal("nothing posted")
	}
	first, err1 := slacktest.TSTime(msgs[0].TS)
	last, err2 := slacktest.TSTime(msgs[len(msgs)-1].TS)
	if err := errors.Join(err1, err2); err != nil {
		b.Fatal(err)
	}
	return burstResult{platform: last.Sub(first) + postBurstEvery, wall: wall,
		rtt: way.total / time.Duration(max(way.n, 1)), limited: fake.RateLimited("chat.postMessage")}
}
