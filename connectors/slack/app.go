package slack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// What the Slack app must allow for this connector, declared once: `bridge
// init --slack` writes the app manifest from it, the README's list follows
// it, and a test checks it against the Web API methods the connector calls
// and the events it acts on.

// Scope is a bot token scope and why the connector needs it.
type Scope struct {
	Name string
	Why  string
}

// BotScopes are the bot token scopes the connector needs.
var BotScopes = []Scope{
	{"app_mentions:read", "receive mentions of the bot (the app_mention event): asks"},
	{"chat:write", "post threads, replies, cards and refusals (chat.postMessage, chat.postEphemeral); edit them (chat.update); stream answers (chat.startStream, chat.appendStream, chat.stopStream)"},
	{"channels:history", "thread replies in public channels (message.channels); find a post in doubt (conversations.replies, conversations.history)"},
	{"groups:history", "thread replies in private channels (message.groups); find a post in doubt there"},
	{"im:write", "open the direct message an approval card goes to (conversations.open)"},
	{"im:history", "find a direct message in doubt (conversations.history)"},
}

// BotEvents are the bot events the app subscribes to.
var BotEvents = []string{"app_mention", "message.channels", "message.groups"}

// MethodScopes maps every Web API method the connector calls to the scopes
// that allow it (any one of them; none: the token alone). apps.connections.open
// takes the app-level token with connections:write (Socket Mode). The
// streaming methods take chat:write (their reference pages on docs.slack.dev:
// chat.startStream, chat.appendStream, chat.stopStream); where Slack refuses
// them all the same, the live answer is a reply edited with chat.update.
var MethodScopes = map[string][]string{
	"auth.test":             nil,
	"apps.connections.open": {AppTokenScope},
	"chat.postMessage":      {"chat:write"},
	"chat.postEphemeral":    {"chat:write"},
	"chat.update":           {"chat:write"},
	"chat.startStream":      {"chat:write"},
	"chat.appendStream":     {"chat:write"},
	"chat.stopStream":       {"chat:write"},
	"conversations.open":    {"im:write"},
	"conversations.replies": {"channels:history", "groups:history", "im:history"},
	"conversations.history": {"channels:history", "groups:history", "im:history"},
}

// AppTokenScope is the scope of the app-level token Socket Mode needs.
const AppTokenScope = "connections:write"

// ScopeNames are the names of BotScopes, in order.
func ScopeNames() []string {
	names := make([]string, len(BotScopes))
	for i, s := range BotScopes {
		names[i] = s.Name
	}
	return names
}

// Manifest is the Slack app manifest (JSON) for "Create an app → From a
// manifest": the bot user, its scopes and events, interactivity, and either
// Socket Mode (mode socket) or the request URLs under baseURL (mode events,
// e.g. https://bridge.example.com).
func Manifest(appName, mode, baseURL string) ([]byte, error) {
	if appName == "" {
		appName = "roombridge"
	}
	events := map[string]any{"bot_events": BotEvents}
	interactivity := map[string]any{"is_enabled": true}
	socket := true
	switch mode {
	case "", ModeSocket:
	case ModeEvents:
		if baseURL == "" {
			return nil, fmt.Errorf("slack: manifest: events mode needs the bridge's public URL")
		}
		base := strings.TrimSuffix(baseURL, "/")
		events["request_url"] = base + "/slack/events"
		interactivity["request_url"] = base + "/slack/interactivity"
		socket = false
	default:
		return nil, fmt.Errorf("slack: manifest: mode %q (want %s or %s)", mode, ModeSocket, ModeEvents)
	}
	m := map[string]any{
		"display_information": map[string]any{"name": appName,
			"description": "AI agents in this workspace's channels, through roombridge"},
		"features":     map[string]any{"bot_user": map[string]any{"display_name": appName, "always_online": true}},
		"oauth_config": map[string]any{"scopes": map[string]any{"bot": slices.Clone(ScopeNames())}},
		"settings": map[string]any{
			"event_subscriptions":    events,
			"interactivity":          interactivity,
			"socket_mode_enabled":    socket,
			"org_deploy_enabled":     false,
			"token_rotation_enabled": false,
		},
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("slack: manifest: %w", err)
	}
	return append(b, '\n'), nil
}
