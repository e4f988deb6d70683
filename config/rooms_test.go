package config

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

const roomsBase = `owner: acme
agents: {coder: {command: [demo]}}
slack: {bot_token: xoxb-1, app_token: xapp-1}
feishu: {app_id: cli_1, app_secret: s}
`

// A room binds a channel per surface with channels; the older keys
// (slack_channel, feishu_chat, console: true) still load into the same
// bindings.
func TestRoomChannels(t *testing.T) {
	for name, rooms := range map[string]string{
		"channels": "rooms: [{name: backend, channels: {slack: C1, feishu: oc_1, console: backend}, agents: [coder]}]\n",
		"old keys": "rooms: [{name: backend, slack_channel: C1, feishu_chat: oc_1, console: true, agents: [coder]}]\n",
		"mixed":    "rooms: [{name: backend, slack_channel: C1, channels: {feishu: oc_1, console: backend}, agents: [coder]}]\n",
	} {
		c, err := Parse([]byte(roomsBase + rooms))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := map[string]string{"slack": "C1", "feishu": "oc_1", "console": "backend"}
		if got := c.Rooms[0].Bound(); !maps.Equal(got, want) {
			t.Errorf("%s: bound %v, want %v", name, got, want)
		}
	}
}

// Errors name the exact key.
func TestRoomChannelErrors(t *testing.T) {
	for _, c := range []struct{ rooms, key, msg string }{
		{"[{name: r, channels: {teams: T1}, agents: [coder]}]", "rooms[0].channels.teams", "unknown surface"},
		{"[{name: r, channels: {slack: ''}, agents: [coder]}]", "rooms[0].channels.slack", "empty"},
		{"[{name: r, slack_channel: C1, channels: {slack: C2}, agents: [coder]}]", "rooms[0].slack_channel", "conflicts with rooms[0].channels.slack"},
		{"[{name: r, console: true, channels: {console: x}, agents: [coder]}]", "rooms[0].console", "conflicts with rooms[0].channels.console"},
		{"[{name: r, agents: [coder]}]", "rooms[0]", "bind the room to a channel"},
		{"[{name: a, channels: {slack: C1}, agents: [coder]}, {name: b, slack_channel: C1, agents: [coder]}]",
			"rooms[1].slack_channel", "bound to another room already (rooms[0].channels.slack)"},
		{"[{name: a, feishu_chat: oc_1, agents: [coder]}, {name: b, channels: {feishu: oc_1}, agents: [coder]}]",
			"rooms[1].channels.feishu", "bound to another room already (rooms[0].feishu_chat)"},
		{"[{name: a, channels: {console: main}, agents: [coder]}, {name: main, console: true, agents: [coder]}]",
			"rooms[1].console", "bound to another room already"},
		{"[{name: r, channels: {slack: [C1]}, agents: [coder]}]", "rooms[0].channels.slack", ""},
	} {
		_, err := Parse([]byte(roomsBase + "rooms: " + c.rooms + "\n"))
		var ke *Error
		if !errors.As(err, &ke) || ke.Key != c.key || !strings.Contains(ke.Msg, c.msg) {
			t.Errorf("rooms: %s: got %v, want %s: …%s…", c.rooms, err, c.key, c.msg)
		}
	}
	_, err := Parse([]byte("owner: acme\nagents: {coder: {command: [demo]}}\nrooms: [{name: r, channels: {slack: C1}, agents: [coder]}]\n"))
	if err == nil || !strings.Contains(err.Error(), "rooms[0].channels.slack: set, but there is no slack section") {
		t.Errorf("a slack channel without slack: %v", err)
	}
}
