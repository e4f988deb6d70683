package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/internal/handled"
)

// botRetry spaces attempts to learn the bot's open_id after a failure.
const botRetry = 10 * time.Second

// maxToast bounds a toast's text.
const maxToast = 200

// errNoHandler: an event arrived before Run or Routes named a handler; the
// error makes Feishu deliver it again later.
var errNoHandler = errors.New("feishu: not ready for events yet")

// errUnsureMention: a message mentions someone, and without the bot's open_id
// the connector cannot tell whether it is the bot; the error makes Feishu
// deliver the message again later.
var errUnsureMention = errors.New("feishu: cannot tell whether a message mentions the bot: its open_id is unknown")

// onMessage handles im.message.receive_v1: a mention of the bot (or a direct
// message to it) is an ask, a message in a topic is a reply to the request
// whose card roots the topic. It returns within the ack budget: nil once
// the core has handled (stored) the event, else errNotStored, so that
// Feishu pushes the event again and the core's dedupe keeps it once. So too
// when the budget runs out first (an acknowledged event is never pushed
// again: a crash before the core stored it would lose it); the handling
// goes on, and its answer is told once (notice): the redelivery gets the
// recorded answer without the core (handled.Answer.Repeat), and tells it
// only if the late answer's notice failed.
func (c *Connector) onMessage(ctx context.Context, ev *larkim.P2MessageReceiveV1) error {
	arrived := time.Now()
	h := c.current()
	if h == nil {
		return errNoHandler
	}
	in, mentioned, ok, err := c.toEvent(ctx, ev)
	if err != nil || !ok {
		return err
	}
	msgID := *ev.Event.Message.MessageId
	tell := func(a handled.Answer) {
		// A refusal, or the answer to a command ("@bridge tasks"), is worth
		// a reply when the person addressed the bot; chatter in a topic
		// that merely fails to route is only logged.
		switch {
		case !a.Tell:
		case !a.Error && !a.Answer || a.Text == "" || (in.Kind == chat.Reply && !mentioned):
			c.answered.Told(in.ID, true) // nothing to tell
		default:
			c.notice(in.Channel, msgID, in.ID, a.Text)
		}
	}
	return c.deliver(ctx, h, in, arrived, "message", tell)
}

// deliver hands in (what: a message, a recall) to the core and answers
// Feishu: nil once the core has handled it, after tell (which also tells
// the answer of a late one), else errNotStored, so that Feishu pushes it
// again; an ack budget run out is logged.
func (c *Connector) deliver(ctx context.Context, h chat.Handler, in chat.Event, arrived time.Time, what string, tell func(handled.Answer)) error {
	a, done := c.call(ctx, h, in, arrived, tell)
	if !done {
		c.log.WarnContext(ctx, "feishu: ack budget ran out: "+what+" answered with an error for Feishu to push it again; its handling goes on",
			"event_id", in.ID, "kind", string(in.Kind), "budget", c.opts.AckBudget)
	}
	if !done || a.Retry {
		return errNotStored
	}
	tell(a)
	return nil
}

// errNotStored answers an event the core failed to take on our side
// (chat.Response.Retry), or a message the core has not stored within the
// ack budget: an error, so that Feishu delivers it again.
var errNotStored = errors.New("feishu: the bridge could not store the event; deliver it again")

// toEvent turns a received message into a chat event; ok is false for
// messages that are not for the bridge (from bots, unaddressed chatter).
func (c *Connector) toEvent(ctx context.Context, ev *larkim.P2MessageReceiveV1) (in chat.Event, mentioned, ok bool, err error) {
	if ev == nil || ev.Event == nil || ev.Event.Message == nil || ev.Event.Sender == nil {
		return in, false, false, nil
	}
	msg, sender := ev.Event.Message, ev.Event.Sender
	if str(sender.SenderType) != "user" || sender.SenderId == nil || str(sender.SenderId.OpenId) == "" ||
		str(msg.MessageId) == "" || str(msg.ChatId) == "" {
		return in, false, false, nil
	}
	var mentions []mention
	var unsure bool // a mention that may or may not be of the bot
	if len(msg.Mentions) > 0 {
		bot := c.botOpenID(ctx)
		for _, m := range msg.Mentions {
			if m == nil || m.Key == nil {
				continue
			}
			mm := mention{key: *m.Key, name: str(m.Name)}
			switch {
			case bot != "":
				mm.bot = m.Id != nil && str(m.Id.OpenId) == bot
			case str(m.MentionedType) != "":
				// Without the bot's identity, Feishu's mentioned_type is
				// the next best evidence.
				mm.bot = str(m.MentionedType) == "bot"
			default:
				unsure = true
			}
			mentioned = mentioned || mm.bot
			mentions = append(mentions, mm)
		}
	}
	if unsure && !mentioned && str(msg.RootId) == "" && str(msg.ChatType) != "p2p" {
		// Erring either way is wrong: fail, and Feishu delivers it again.
		return in, false, false, fmt.Errorf("%w (message %s)", errUnsureMention, str(msg.MessageId))
	}
	in = chat.Event{
		Surface: chat.Feishu,
		Channel: *msg.ChatId,
		User:    chat.Feishu + ":" + *sender.SenderId.OpenId,
		Text:    messageText(str(msg.MessageType), str(msg.Content), mentions),
		Message: *msg.MessageId,
	}
	if ev.EventV2Base != nil && ev.EventV2Base.Header != nil {
		in.ID = ev.EventV2Base.Header.EventID
	}
	if str(msg.ChatType) == "p2p" {
		c.p2p.learn(*sender.SenderId.OpenId, *msg.ChatId)
	}
	switch {
	case str(msg.RootId) != "":
		in.Kind = chat.Reply
		in.Thread = &chat.ThreadRef{Surface: chat.Feishu, Channel: *msg.ChatId, ID: *msg.RootId}
	case mentioned || str(msg.ChatType) == "p2p":
		in.Kind = chat.Ask
	default:
		return in, false, false, nil
	}
	return in, mentioned, true, nil
}

type mention struct {
	key, name string
	bot       bool
}

// atAll is how Feishu writes a mention of everyone in a message's text.
const atAll = "@_all"

// messageText extracts the text of a text or post message, with the bot's
// mention removed, other mentions written as @name, everyone's as @all.
func messageText(msgType, content string, mentions []mention) string {
	var raw string
	switch msgType {
	case larkim.MsgTypeText:
		var t struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal([]byte(content), &t)
		raw = t.Text
	case larkim.MsgTypePost:
		raw = postText(content)
	default:
		return ""
	}
	// Longest keys first: "@_user_10" before "@_user_1".
	slices.SortFunc(mentions, func(a, b mention) int { return len(b.key) - len(a.key) })
	for _, m := range mentions {
		with := "@" + m.name
		switch {
		case m.bot:
			with = ""
		case m.key == atAll:
			continue
		}
		raw = strings.ReplaceAll(raw, m.key, with)
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(raw, atAll, "@all")), " ")
}

// postText flattens a post (rich text) message: text, links and mentions.
func postText(content string) string {
	var p struct {
		Title   string `json:"title"`
		Content [][]struct {
			Tag    string `json:"tag"`
			Text   string `json:"text"`
			Href   string `json:"href"`
			UserID string `json:"user_id"`
		} `json:"content"`
	}
	if json.Unmarshal([]byte(content), &p) != nil {
		return ""
	}
	var lines []string
	for _, para := range p.Content {
		var b strings.Builder
		for _, el := range para {
			switch el.Tag {
			case "text", "code_block", "md":
				b.WriteString(el.Text)
			case "a":
				b.WriteString(chat.LinkText(el.Text, el.Href))
			case "at":
				if el.UserID == "all" {
					el.UserID = atAll
				}
				b.WriteString(" " + el.UserID + " ")
			}
		}
		lines = append(lines, b.String())
	}
	return strings.Join(lines, "\n")
}

// onCardAction handles card.action.trigger: a button press becomes a
// chat.Click (in the topic its button names, if any: it keeps its order
// with the topic's replies); the answer (within 3 s) is a toast with what
// the core said. A core slower than the ack budget gets the click
// acknowledged anyway, with a toast that it is under way, and handles it
// afterwards: answered with an error, Feishu would only show the clicker an
// error, and a re-push would repeat the click.
func (c *Connector) onCardAction(ctx context.Context, ev *callback.CardActionTriggerEvent) (*callback.CardActionTriggerResponse, error) {
	arrived := time.Now()
	h := c.current()
	if h == nil {
		return nil, errNoHandler
	}
	if ev == nil || ev.Event == nil || ev.Event.Action == nil || ev.Event.Operator == nil || ev.Event.Operator.OpenID == "" {
		return toast("error", "This button sent an incomplete callback."), nil
	}
	a := ev.Event.Action
	block, _ := a.Value[valueBlock].(string)
	action, _ := a.Value[valueAction].(string)
	value, _ := a.Value[valueValue].(string)
	if block == "" || action == "" {
		return toast("error", "This button is not one of the bridge's."), nil
	}
	in := chat.Event{
		Kind:    chat.Click,
		Surface: chat.Feishu,
		User:    chat.Feishu + ":" + ev.Event.Operator.OpenID,
		Click:   &chat.ClickAction{BlockID: block, ActionID: action, Value: value},
	}
	if ev.EventV2Base != nil && ev.EventV2Base.Header != nil {
		in.ID = ev.EventV2Base.Header.EventID
	}
	if cx := ev.Event.Context; cx != nil {
		in.Channel = cx.OpenChatID
		in.Click.Message = chat.MessageRef{Surface: chat.Feishu, Channel: cx.OpenChatID, ID: cx.OpenMessageID}
	}
	if topic, _ := a.Value[valueTopic].(string); topic != "" {
		in.Thread = &chat.ThreadRef{Surface: chat.Feishu, Channel: in.Channel, ID: topic}
	}
	ans, done := c.call(ctx, h, in, arrived, func(l handled.Answer) {
		c.log.InfoContext(ctx, "feishu: click answered after the ack", "event_id", in.ID, "block", block, "error", l.Error, "retry", l.Retry, "text", l.Text)
	})
	r := ans.Response // its toast is the click's answer, that of a redelivery too
	switch {
	case !done:
		c.log.WarnContext(ctx, "feishu: ack budget ran out: click acknowledged before the core answered; its handling goes on",
			"event_id", in.ID, "kind", string(in.Kind), "budget", c.opts.AckBudget)
		return toast("info", "Received; the card updates in a moment."), nil
	case r.Retry:
		return nil, errNotStored
	case r.Text == "":
		return &callback.CardActionTriggerResponse{}, nil
	case r.Error:
		return toast("error", r.Text), nil
	}
	return toast("success", r.Text), nil
}

func toast(kind, text string) *callback.CardActionTriggerResponse {
	return &callback.CardActionTriggerResponse{Toast: &callback.Toast{Type: kind, Content: clip.Text(text, maxToast, clip.Runes)}}
}

// botOpenID returns the bot's open_id, asking bot/v3/info once (and again
// at most every botRetry after a failure); "" while it is unknown.
func (c *Connector) botOpenID(ctx context.Context) string {
	c.botMu.Lock()
	defer c.botMu.Unlock()
	if c.botID != "" || (!c.botTried.IsZero() && time.Since(c.botTried) < botRetry) {
		return c.botID
	}
	c.botTried = time.Now()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.cli.Get(ctx, "/open-apis/bot/v3/info", nil, larkcore.AccessTokenTypeTenant)
	var info struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		Bot  struct {
			OpenID string `json:"open_id"`
		} `json:"bot"`
	}
	switch {
	case err != nil:
	case json.Unmarshal(resp.RawBody, &info) != nil:
		err = fmt.Errorf("HTTP %d: undecodable answer", resp.StatusCode)
	case info.Code != 0 || info.Bot.OpenID == "":
		err = fmt.Errorf("HTTP %d, code %d: %s", resp.StatusCode, info.Code, info.Msg)
	}
	if err != nil {
		c.log.WarnContext(ctx, "feishu: bot identity unknown; mentions judged by mentioned_type", "error", err)
		return ""
	}
	c.botID = info.Bot.OpenID
	c.log.InfoContext(ctx, "feishu: bot identity", "open_id", c.botID)
	return c.botID
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
