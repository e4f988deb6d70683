// Package chat holds the platform-neutral types of chat surfaces (inbound
// events, messages, cards, buttons, thread references) and the Connector
// interface through which the core talks to Slack, Feishu and the console,
// with the delivery contract between the outbox and the connectors (the
// optional Finder, Lookup, ErrPermanent, RetryAfterError: delivery.go).
// Connectors import chat, never the core packages that use it.
package chat

import (
	"context"
	"fmt"
)

// Surfaces.
const (
	Slack   = "slack"
	Feishu  = "feishu"
	Console = "console"
	API     = "api"
)

// ThreadRef names a request's thread on one surface: Slack's channel and
// parent ts, Feishu's chat and root message ID, the console's request ID.
type ThreadRef struct {
	Surface string `json:"surface"`
	Channel string `json:"channel"`
	ID      string `json:"id"`
}

// MessageRef names one posted message that can be updated later.
type MessageRef struct {
	Surface string `json:"surface"`
	Channel string `json:"channel"`
	ID      string `json:"id"`
}

// Button is one button of a card. Its Value goes back in the Action of a click.
type Button struct {
	ActionID string `json:"action_id"` // "approve" or "deny"
	Label    string `json:"label"`
	Value    string `json:"value"`
	Style    string `json:"style,omitempty"` // "primary", "danger"
	// Confirm, when set, is the question the clicker must confirm before
	// the click counts (Slack's confirm object, Feishu's card confirm).
	Confirm string `json:"confirm,omitempty"`
}

// Field is a label and value shown on a card.
type Field struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Card is a structured message: a thread parent or an approval card.
type Card struct {
	Title  string  `json:"title"`
	Text   string  `json:"text,omitempty"`
	Fields []Field `json:"fields,omitempty"`
	// Status is the live status line ("running · 60%").
	Status string `json:"status,omitempty"`
	// BlockID binds the buttons to what they decide ("approval:<id>:<version>").
	BlockID string   `json:"block_id,omitempty"`
	Buttons []Button `json:"buttons,omitempty"`
}

// Message is something to post or to put in place of an earlier post.
type Message struct {
	// Request is the ID of the request the message belongs to.
	Request string `json:"request"`
	// Kind tells connectors what the message is: "parent", "reply", "final",
	// "approval", "notice".
	Kind string `json:"kind"`
	Text string `json:"text,omitempty"`
	Card *Card  `json:"card,omitempty"`
	// Broadcast also shows a thread reply in the channel.
	Broadcast bool `json:"broadcast,omitempty"`
	// IdempotencyKey is stable across redeliveries of the same effect; a
	// platform that dedupes sends (Feishu's uuid) gets it.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Recipient is who a live message (Streamer.OpenStream) is written
	// for: the asker, as the surface names them (without the prefix), ""
	// when the asker is not of that surface. Slack streams in channels to
	// one recipient.
	Recipient string `json:"recipient,omitempty"`
}

// EventKind says what an inbound event is.
type EventKind string

// Inbound event kinds.
const (
	// Ask: a new ask of an agent (a mention of the bot, "@agent ..." in the console).
	Ask EventKind = "ask"
	// Reply: a message in a request's thread.
	Reply EventKind = "reply"
	// Click: a button of a card was pressed.
	Click EventKind = "click"
	// Command: a typed command ("approve R-07", "cancel R-07", "inbox").
	Command EventKind = "command"
	// Edit: the asker edited the message of an ask (Message names it;
	// Text is its new text, read as an ask's).
	Edit EventKind = "edit"
	// Delete: the message of an ask was deleted (Slack) or recalled
	// (Feishu); Message names it. User is who deleted it, "" when the
	// platform does not say.
	Delete EventKind = "delete"
	// Refused: an inbound webhook the connector refused before anything
	// reached the core (a forged signature, a stale timestamp, an oversize
	// or malformed body); it has already answered the sender. Text says
	// why; User is "<surface>:unverified". The core only audits it, at a
	// bounded rate: anyone can send these.
	Refused EventKind = "refused"
)

// RefusedEvent is the Refused event a connector reports for a webhook it
// answered with HTTP status for reason.
func RefusedEvent(surface string, status int, reason string) Event {
	return Event{Kind: Refused, Surface: surface, User: surface + ":unverified",
		Text: fmt.Sprintf("HTTP %d: %s", status, reason)}
}

// Event is an inbound chat event, already verified by its connector.
type Event struct {
	Kind    EventKind
	Surface string
	// ID is the platform's event ID, for deduplication ("" if none).
	ID string
	// Channel is the Slack channel or Feishu chat the event came from.
	Channel string
	// User is the actor, written surface:id.
	User string
	// Text is the message text as people read it (chat behaviour in
	// docs/design.md): the bot's mention removed, other mentions and links
	// written out, entities unescaped.
	Text string
	// Message is the platform's ID of the message an Ask, Edit or Delete
	// is about (Slack's ts, Feishu's message_id; "" if none): an edit or
	// deletion names the ask's message by it.
	Message string
	// Thread is set for replies and clicks inside a thread.
	Thread *ThreadRef
	// Click is set for Click events.
	Click *ClickAction
}

// Lane is the key under which a connector keeps ev in order with the
// events it must follow (internal/lanes): the events of one thread (its
// replies and the clicks on the cards in it), of one card outside a thread
// (an approver's copy in a direct message), and one person's top-level
// events in a channel keep their order (a "cancel" reply then a click on
// Retry run in that order, a person's asks get their IDs in the order they
// asked, a redelivery follows its first delivery); different people's
// top-level events need no order between them.
func (ev Event) Lane() string {
	switch {
	case ev.Thread != nil:
		return "thread:" + ev.Channel + "/" + ev.Thread.ID
	case ev.Click != nil:
		return "card:" + ev.Click.BlockID
	case ev.User != "":
		return "user:" + ev.Channel + "/" + ev.User
	case ev.ID != "":
		return "event:" + ev.ID
	}
	return ""
}

// ClickAction is a pressed button: what it decides and the card it was on.
type ClickAction struct {
	BlockID  string     // as rendered: "approval:<id>:<version>"
	ActionID string     // "approve" or "deny"
	Value    string     // the button's value
	Message  MessageRef // the card that was clicked
}

// Response is what the actor alone is told about their event (an ephemeral
// message, a toast, a console line). Empty: nothing to say.
type Response struct {
	Text string
	// Error marks a refusal.
	Error bool
	// Answer marks the answer to a command (tasks, inbox, show...): every
	// connector shows it to the actor, as it shows a refusal. Other
	// successes need not be shown: the thread tells what happened.
	Answer bool
	// Retry marks a failure of ours (the store unavailable, full, closed or
	// fenced; the handler's time ran out): nothing was done, and the
	// platform is to deliver the event again. Connectors leave such an
	// event unacknowledged (an HTTP 503, an envelope without its ack) and
	// tell the actor nothing: the redelivery gets the real answer.
	Retry bool
}

// Handler receives inbound events. Connectors acknowledge the platform before
// they call it when the platform demands a fast acknowledgement.
type Handler interface {
	Handle(ctx context.Context, ev Event) Response
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, ev Event) Response

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, ev Event) Response { return f(ctx, ev) }

// Connector is one chat surface as the core sees it.
type Connector interface {
	// Surface names the platform ("slack", "feishu", "console").
	Surface() string
	// Run receives inbound events until ctx ends, passing each to h.
	Run(ctx context.Context, h Handler) error
	// StartThread posts m as the parent of a new thread in channel.
	StartThread(ctx context.Context, channel string, m Message) (ThreadRef, MessageRef, error)
	// Reply posts m in thread t.
	Reply(ctx context.Context, t ThreadRef, m Message) (MessageRef, error)
	// Update replaces the content of a posted message.
	Update(ctx context.Context, ref MessageRef, m Message) error
}

// DirectMessenger is a Connector that can message one user directly (so an
// approver gets the card's buttons on their phone).
type DirectMessenger interface {
	Connector
	// Direct posts m to user (the surface's user ID, without the prefix).
	Direct(ctx context.Context, user string, m Message) (MessageRef, error)
}
