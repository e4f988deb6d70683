package slack_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// unevenWay delays each request on its way to Slack by the next of ups in
// turn: a slow call followed by a fast one, the case where spacing posts
// from their starts alone puts two arrivals close together.
type unevenWay struct {
	ups []time.Duration
	n   atomic.Int64
}

func (u *unevenWay) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(u.ups[int(u.n.Add(1)-1)%len(u.ups)]) // plays the way to Slack
	return http.DefaultTransport.RoundTrip(r)
}

// Posts into one channel start PostSpacing apart, as in production where
// PostSpacing is Slack's own one post per second per channel: against a
// fake of exactly that pace with the short burst Slack tolerates
// (slacktest.DefaultPostBurst), and calls whose way to Slack varies from
// nothing to almost a spacing, no post is answered 429.
func TestPostsAtSlacksPaceAreNeverLimited(t *testing.T) {
	const every, n = 20 * time.Millisecond, 30
	fake := slacktest.NewServer(slacktest.PostMessageLimit(every, slacktest.DefaultPostBurst))
	defer fake.Close()
	way := &unevenWay{ups: []time.Duration{0, 17 * time.Millisecond, 0, 0, 12 * time.Millisecond, 19 * time.Millisecond, 0}}
	conn, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken, SigningSecret: "s",
		APIURL: fake.APIURL(), PostSpacing: every, HTTPClient: &http.Client{Transport: way}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, _, err := conn.StartThread(ctx, "C1", chat.Message{Text: fmt.Sprintf("post %d", i)}); err != nil {
				t.Errorf("post %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if got, limited := len(fake.Messages()), fake.RateLimited("chat.postMessage"); got != n || limited != 0 {
		t.Errorf("%d posts, %d answered 429; want %d, 0", got, limited, n)
	}
}
