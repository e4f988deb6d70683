package slack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// Text longer than the streaming methods take (12,000 characters) is not
// lost: an append that was cut and a rest too long for chat.stopStream end
// with the message's whole text set by chat.update.
func TestStreamLongerThanAnAppend(t *testing.T) {
	for _, c := range []struct{ name, delta, final string }{
		{"cut append", strings.Repeat("a", 13_000), strings.Repeat("a", 13_000) + " end"},
		{"long rest", "start ", "start " + strings.Repeat("b", 13_000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := slacktest.NewServer()
			defer fake.Close()
			conn, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken,
				SigningSecret: secret, APIURL: fake.APIURL(), PostSpacing: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// In a DM: streaming there needs no recipient team (auth.test's, not asked here).
			th, _, err := conn.StartThread(ctx, "D"+owner, chat.Message{Request: "R1", Kind: "parent", Text: "R1"})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := conn.OpenStream(ctx, th, chat.Message{Request: "R1", Kind: "live"})
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.AppendStream(ctx, ref, chat.StreamUpdate{Delta: c.delta, Text: c.delta}); err != nil {
				t.Fatal(err)
			}
			if err := conn.CloseStream(ctx, ref, chat.Message{Request: "R1", Kind: "answer", Text: c.final}); err != nil {
				t.Fatal(err)
			}
			m, ok := fake.Message(ref.Channel, ref.ID)
			if m.Appends == 0 {
				t.Errorf("the live message was not streamed (%d appends)", m.Appends)
			}
			if !ok || m.Streaming || m.Text != c.final {
				t.Errorf("live message: found %v, streaming %v, %d chars ending %q; want stopped, the %d chars ending %q",
					ok, m.Streaming, len(m.Text), tail(m.Text), len(c.final), tail(c.final))
			}
		})
	}
}

func tail(s string) string { return s[max(0, len(s)-8):] }
