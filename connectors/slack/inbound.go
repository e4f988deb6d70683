package slack

import (
	"context"
	"fmt"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/roombridge/roombridge/chat"
)

// Inbound events, the same in both modes:
//
//   - an app_mention at the top level of a channel is an Ask (the bot's
//     mention removed; the agent's name may follow, the core resolves it;
//     the core also tells a command from an ask: "@bridge tasks");
//   - a message in a thread (a reply, also one broadcast to the channel) is a
//     Reply with Thread set to the thread's parent; the core finds the
//     request whose thread it is. app_mention events inside threads are
//     ignored: the message event of the same message carries them (the app
//     subscribes to message.channels and message.groups for thread replies);
//   - a block_actions interaction is a Click per action, naming the card's
//     block_id, the button and the clicked message.
//
//   - the edit (message_changed) or deletion (message_deleted) of a
//     top-level message is an Edit or a Delete naming the message's ts; the
//     core follows those of an ask's message.
//
// Everything else (joins, the bot's own posts, edits and deletions of
// replies, top-level chatter, and events that name no channel: nowhere to
// answer them) is acknowledged and dropped.

// fromEventsAPI translates an Events API callback; ok is false for events
// the bridge does not act on.
func (c *Connector) fromEventsAPI(ev slackevents.EventsAPIEvent) (chat.Event, bool) {
	if ev.Type != slackevents.CallbackEvent {
		return chat.Event{}, false
	}
	cb, ok := ev.Data.(*slackevents.EventsAPICallbackEvent)
	if !ok {
		return chat.Event{}, false
	}
	bot := c.botUserID()
	if bot == "" {
		for _, a := range cb.Authorizations {
			if a.IsBot && a.UserID != "" {
				bot = a.UserID
				break
			}
		}
	}
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if e.User == "" || e.Channel == "" || e.BotID != "" || e.User == bot || e.Edited != nil || inThread(e.ThreadTimeStamp, e.TimeStamp) {
			return chat.Event{}, false
		}
		return chat.Event{Kind: chat.Ask, Surface: chat.Slack, ID: cb.EventID, Channel: e.Channel,
			User: chat.Slack + ":" + e.User, Text: PlainText(stripMention(e.Text, bot)), Message: e.TimeStamp}, true
	case *slackevents.MessageEvent:
		switch e.SubType {
		case "message_changed", "message_deleted":
			return askChange(e, cb.EventID, bot)
		case "", "thread_broadcast", "file_share":
		default:
			return chat.Event{}, false
		}
		if e.User == "" || e.Channel == "" || e.BotID != "" || e.User == bot || !inThread(e.ThreadTimeStamp, e.TimeStamp) {
			return chat.Event{}, false
		}
		return chat.Event{Kind: chat.Reply, Surface: chat.Slack, ID: cb.EventID, Channel: e.Channel,
			User: chat.Slack + ":" + e.User, Text: PlainText(stripMention(e.Text, bot)),
			Thread: &chat.ThreadRef{Surface: chat.Slack, Channel: e.Channel, ID: e.ThreadTimeStamp}}, true
	}
	return chat.Event{}, false
}

// askChange translates the edit (message_changed) or the deletion
// (message_deleted) of a top-level message by a person: the core follows
// those of an ask. A message_changed without an edit (an unfurl, a reply
// count) or that leaves the text as it was is dropped. Slack does not say
// who deleted a message: a deletion names nobody.
func askChange(e *slackevents.MessageEvent, eventID, bot string) (chat.Event, bool) {
	ev := chat.Event{Surface: chat.Slack, ID: eventID, Channel: e.Channel}
	if e.Channel == "" {
		return ev, false
	}
	if e.SubType == "message_deleted" {
		prev := e.PreviousMessage
		if e.DeletedTimeStamp == "" || prev != nil && (prev.BotID != "" || prev.User == bot || inThread(prev.ThreadTimestamp, prev.Timestamp)) {
			return ev, false
		}
		ev.Kind, ev.Message = chat.Delete, e.DeletedTimeStamp
		return ev, true
	}
	m := e.Message
	if m == nil || m.Edited == nil || m.User == "" || m.BotID != "" || m.User == bot || m.Timestamp == "" ||
		inThread(m.ThreadTimestamp, m.Timestamp) || e.PreviousMessage != nil && e.PreviousMessage.Text == m.Text {
		return ev, false
	}
	ev.Kind, ev.Message = chat.Edit, m.Timestamp
	ev.User, ev.Text = chat.Slack+":"+m.User, PlainText(stripMention(m.Text, bot))
	return ev, true
}

// inThread reports whether a message with ts and threadTS is a reply (a
// thread's parent has thread_ts == ts).
func inThread(threadTS, ts string) bool { return threadTS != "" && threadTS != ts }

// fromInteraction translates a block_actions interaction into one Click per
// action. The trigger_id is unique per click and the same in a redelivery,
// so it serves as the event's ID.
func fromInteraction(ic slackgo.InteractionCallback) []chat.Event {
	if ic.Type != slackgo.InteractionTypeBlockActions || ic.User.ID == "" {
		return nil
	}
	channel := ic.Channel.ID
	if channel == "" {
		channel = ic.Container.ChannelID
	}
	msgTS := ic.Container.MessageTs
	if msgTS == "" {
		msgTS = ic.Message.Timestamp
	}
	var thread *chat.ThreadRef
	if inThread(ic.Container.ThreadTs, msgTS) {
		thread = &chat.ThreadRef{Surface: chat.Slack, Channel: channel, ID: ic.Container.ThreadTs}
	}
	var out []chat.Event
	for _, a := range ic.ActionCallback.BlockActions {
		id := ic.TriggerID
		if len(ic.ActionCallback.BlockActions) > 1 {
			id += "/" + a.ActionID
		}
		out = append(out, chat.Event{Kind: chat.Click, Surface: chat.Slack, ID: id, Channel: channel,
			User: chat.Slack + ":" + ic.User.ID, Thread: thread,
			Click: &chat.ClickAction{BlockID: a.BlockID, ActionID: a.ActionID, Value: a.Value,
				Message: chat.MessageRef{Surface: chat.Slack, Channel: channel, ID: msgTS}}})
	}
	return out
}

// respond shows the actor a refusal or the answer to a command (a mention
// such as "@bridge tasks") as an ephemeral message (in the thread it came
// from). Other successes say nothing: the thread shows what happened.
// Ephemeral messages are not effects of the outbox: they belong to the actor
// alone, are not durable in Slack either, and cannot be updated.
// It reports whether the actor was told (nil: told, or nothing to tell).
func (c *Connector) respond(ctx context.Context, ev chat.Event, r chat.Response) error {
	if !r.Error && !r.Answer || r.Text == "" || ev.Channel == "" {
		return nil
	}
	user := ev.User[len(chat.Slack)+1:]
	opts := []slackgo.MsgOption{slackgo.MsgOptionText(Mrkdwn(r.Text, maxMessageText), false)}
	if ev.Thread != nil {
		opts = append(opts, slackgo.MsgOptionTS(ev.Thread.ID))
	}
	if _, err := c.api.PostEphemeralContext(ctx, ev.Channel, user, opts...); err != nil {
		c.log.WarnContext(ctx, "posting an ephemeral answer", "user", ev.User, "channel", ev.Channel, "event_id", ev.ID, "error", err)
		return fmt.Errorf("slack: chat.postEphemeral: %w", err)
	}
	return nil
}
