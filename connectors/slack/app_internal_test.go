package slack

import (
	"bytes"
	"slices"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// TestBotEventsActedOn: every bot event the manifest subscribes to is one
// the connector acts on (an app_mention ask; a thread reply in a public
// channel, message.channels, or a private one, message.groups), and the
// manifest subscribes to every kind of event the connector acts on.
func TestBotEventsActedOn(t *testing.T) {
	c := &Connector{}
	bot := slacktest.BotUserID
	c.botUser.Store(&bot)
	reply := func(channelType string) []byte {
		b := slacktest.MessageEvent("Ev2", "C1", "U1", "more", "100.000003", "100.000002")
		return bytes.Replace(b, []byte(`"channel_type":"channel"`), []byte(`"channel_type":"`+channelType+`"`), 1)
	}
	acts := map[string]struct {
		body []byte
		kind chat.EventKind
	}{
		"app_mention":      {slacktest.AppMentionEvent("Ev1", "C1", "U1", "<@U0BOT> coder hi", "100.000001", ""), chat.Ask},
		"message.channels": {reply("channel"), chat.Reply},
		"message.groups":   {reply("group"), chat.Reply},
	}
	for _, name := range BotEvents {
		a, ok := acts[name]
		if !ok {
			t.Errorf("the manifest subscribes to %s, which the connector does not act on", name)
			continue
		}
		if ev, ok := c.fromEventsAPI(parse(t, a.body)); !ok || ev.Kind != a.kind {
			t.Errorf("%s → %+v, %v: want a %v", name, ev, ok, a.kind)
		}
	}
	for name := range acts {
		if !slices.Contains(BotEvents, name) {
			t.Errorf("the connector acts on %s, which the manifest does not subscribe to", name)
		}
	}
}
