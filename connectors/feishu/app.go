package feishu

import (
	"fmt"
	"strings"
)

// What the Feishu app must enable for this connector, declared once: `bridge
// init --feishu` prints it (Feishu has no manifest import) and the README
// follows it.

// Permission is an app permission and why the connector needs it.
type Permission struct {
	Name     string
	Why      string
	Optional bool
}

// Permissions are the permissions the self-built app needs.
var Permissions = []Permission{
	{Name: "im:message", Why: "read and send messages in chats with the bot"},
	{Name: "im:message:send_as_bot", Why: "send topics, replies and cards as the bot"},
	{Name: "im:message.group_at_msg:readonly", Why: "receive mentions of the bot in group chats: asks"},
	{Name: "im:message.group_msg", Why: "see thread replies that do not mention the bot", Optional: true},
	{Name: "cardkit:card:write", Why: "stream answers into CardKit cards (without it: a card updated by PATCH)", Optional: true},
}

// Event is the event subscription the connector handles (event, not
// callback, subscription).
const Event = "im.message.receive_v1"

// RecallEvent is the event of a recalled message: with it, recalling an ask
// that has not started cancels its request (docs/design.md, chat behaviour).
const RecallEvent = "im.message.recalled_v1"

// Callback is the callback subscription the connector handles: button
// presses on its cards.
const Callback = "card.action.trigger"

// Setup is the text `bridge init --feishu` prints: what to enable in the
// Feishu developer console for mode (ws or callback), with the callback URL
// under baseURL when it is known.
func Setup(mode, baseURL string) string {
	var b strings.Builder
	b.WriteString("Feishu developer console → your self-built app:\n")
	b.WriteString("  Features: enable the bot ability.\n")
	b.WriteString("  Permissions & Scopes, add:\n")
	for _, p := range Permissions {
		opt := ""
		if p.Optional {
			opt = " (optional)"
		}
		fmt.Fprintf(&b, "    %s%s: %s\n", p.Name, opt, p.Why)
	}
	url := "https://<your bridge>/feishu/events"
	if baseURL != "" {
		url = strings.TrimSuffix(baseURL, "/") + "/feishu/events"
	}
	if mode == ModeCallback {
		fmt.Fprintf(&b, "  Events & Callbacks → Event configuration: request URL %s, add the events %s and %s\n", url, Event, RecallEvent)
	} else {
		fmt.Fprintf(&b, "  Events & Callbacks → Event configuration: receive events through the long connection, add the events %s and %s\n", Event, RecallEvent)
	}
	b.WriteString("    (the second: recalling an ask that has not started cancels it)\n")
	fmt.Fprintf(&b, "  Events & Callbacks → Callback configuration: request URL %s, add the callback %s\n", url, Callback)
	b.WriteString("    (card clicks: the long connection's SDK drops card frames, so point the callback at the HTTP route and set feishu.verification_token_file)\n")
	b.WriteString("  Then publish a version, and add the bot to each room's chat.\n")
	return b.String()
}
