package slack_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// manifest is the part of a Slack app manifest the bridge writes.
type manifest struct {
	Features struct {
		BotUser struct {
			DisplayName string `json:"display_name"`
		} `json:"bot_user"`
	} `json:"features"`
	OAuth struct {
		Scopes struct {
			Bot []string `json:"bot"`
		} `json:"scopes"`
	} `json:"oauth_config"`
	Settings struct {
		Events struct {
			RequestURL string   `json:"request_url"`
			BotEvents  []string `json:"bot_events"`
		} `json:"event_subscriptions"`
		Interactivity struct {
			IsEnabled  bool   `json:"is_enabled"`
			RequestURL string `json:"request_url"`
		} `json:"interactivity"`
		SocketMode bool `json:"socket_mode_enabled"`
	} `json:"settings"`
}

func parseManifest(t *testing.T, mode, url string) manifest {
	t.Helper()
	b, err := slack.Manifest("acme bridge", mode, url)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest %s: %v", b, err)
	}
	return m
}

// TestManifestModes: Socket Mode on, or the request URLs of events mode.
func TestManifestModes(t *testing.T) {
	m := parseManifest(t, slack.ModeSocket, "")
	if !m.Settings.SocketMode || !m.Settings.Interactivity.IsEnabled || m.Settings.Events.RequestURL != "" ||
		m.Features.BotUser.DisplayName != "acme bridge" {
		t.Errorf("socket mode manifest %+v", m)
	}
	m = parseManifest(t, slack.ModeEvents, "https://bridge.example.com/")
	if m.Settings.SocketMode || m.Settings.Events.RequestURL != "https://bridge.example.com/slack/events" ||
		m.Settings.Interactivity.RequestURL != "https://bridge.example.com/slack/interactivity" {
		t.Errorf("events mode manifest %+v", m)
	}
	if _, err := slack.Manifest("x", slack.ModeEvents, ""); err == nil {
		t.Error("events mode without a URL: no error")
	}
}

// TestManifestCoversCalls runs the connector through everything it does
// against the fake Slack (a request asked, approved in a DM with a refused
// click on the way, answered; lookups of posts in doubt in a thread, a
// channel and a DM; an answer streamed into its thread) and checks that every Web API method it called is
// declared, with a scope the manifest grants, and that the manifest
// subscribes to the events the connector declares.
func TestManifestCoversCalls(t *testing.T) {
	m := parseManifest(t, slack.ModeSocket, "")
	if !slices.Equal(m.OAuth.Scopes.Bot, slack.ScopeNames()) || !slices.Equal(m.Settings.Events.BotEvents, slack.BotEvents) {
		t.Errorf("manifest scopes %q events %q, the connector declares %q and %q",
			m.OAuth.Scopes.Bot, m.Settings.Events.BotEvents, slack.ScopeNames(), slack.BotEvents)
	}

	h := newHarness(t, fast(setup{mode: slack.ModeSocket}))
	h.mention(member, "coder echo done")
	var card, dm slacktest.Message
	h.waitFake("the approval card in the thread and the DM", func(s *slacktest.Server) bool {
		for _, msg := range s.Messages() {
			switch {
			case msg.Channel == channel && hasButtons(msg):
				card = msg
			case msg.Channel == "D"+owner && hasButtons(msg):
				dm = msg
			}
		}
		return card.TS != "" && dm.TS != ""
	})
	id := h.requests()[0].ID.String()
	blockID := actionsBlockID(t, dm)
	h.click(slacktest.BlockActionsPayload(member, channel, card.TS, card.ThreadTS, blockID, "approve", id))
	h.waitFake("the refusal", func(s *slacktest.Server) bool { return len(s.Ephemerals()) > 0 })
	h.click(slacktest.BlockActionsPayload(owner, dm.Channel, dm.TS, "", blockID, "approve", id))
	h.waitStore("the request done and delivered", func() bool {
		rs, _ := h.svc.List(h.ctx(), requests.Filter{State: requests.Done})
		return len(rs) == 1 && h.outboxEmpty()
	})
	since := time.Now().Add(-time.Minute)
	thread := chat.ThreadRef{Surface: chat.Slack, Channel: channel, ID: card.ThreadTS}
	for _, l := range []chat.Lookup{
		{Key: "k1", Thread: &thread, Since: since},
		{Key: "k2", Channel: channel, Since: since},
		{Key: "k3", User: owner, Since: since},
	} {
		if _, _, err := h.conn.FindPosted(h.ctx(), l); err != nil {
			t.Fatalf("lookup %+v: %v", l, err)
		}
	}

	// An owner's ask whose answer streams: chat.startStream, appendStream
	// and stopStream (the stop delivers the answer, so the outbox empties
	// only after it).
	h.mention(owner, streamAsk)
	h.waitStore("the streamed answer done and delivered", func() bool {
		rs, _ := h.svc.List(h.ctx(), requests.Filter{State: requests.Done})
		return len(rs) == 2 && h.outboxEmpty()
	})

	called := h.fake.Methods()
	for _, want := range []string{"auth.test", "apps.connections.open", "chat.postMessage", "chat.postEphemeral",
		"chat.update", "conversations.open", "conversations.replies", "conversations.history",
		"chat.startStream", "chat.appendStream", "chat.stopStream"} {
		if !slices.Contains(called, want) {
			t.Errorf("the flow never called %s (called %q): the test no longer covers it", want, called)
		}
	}
	for _, method := range called {
		scopes, ok := slack.MethodScopes[method]
		if !ok {
			t.Errorf("the connector called %s, which slack.MethodScopes does not declare", method)
			continue
		}
		if len(scopes) > 0 && !slices.ContainsFunc(scopes, func(s string) bool {
			return slices.Contains(m.OAuth.Scopes.Bot, s) || s == slack.AppTokenScope
		}) {
			t.Errorf("%s needs one of %q; the manifest grants %q", method, scopes, m.OAuth.Scopes.Bot)
		}
	}
	for _, s := range slack.BotScopes {
		if strings.TrimSpace(s.Why) == "" {
			t.Errorf("scope %s has no reason", s.Name)
		}
	}
}
