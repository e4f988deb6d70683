package slack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	slackgo "github.com/slack-go/slack"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/longtext"
)

// metadataType is the event_type of the metadata each post carries; its
// event_payload is {"key": <the message's idempotency key>}.
const metadataType = "roombridge_effect"

// Bounds of a lookup (FindPosted).
const (
	// findSkew is how long before its effect was enqueued a post is still
	// looked for: the bridge's clock and Slack's may differ.
	findSkew = time.Minute
	// findPage messages to a page, at most findPages pages: the newest
	// 400 top-level messages of a channel since the effect was enqueued,
	// the oldest 400 messages of a thread.
	findPage  = 200
	findPages = 2
)

func keyMetadata(key string) slackgo.SlackMetadata {
	return slackgo.SlackMetadata{EventType: metadataType, EventPayload: map[string]any{"key": key}}
}

// FindPosted implements chat.Finder: it looks for the message posted with
// l.Key (in its metadata, or the share of its file: long.go) among the replies of l.Thread
// (conversations.replies), or the top-level messages of l.Channel or of the
// direct messages with l.User (conversations.history), since shortly before
// l.Since, within findPages pages of findPage messages. The lookups share an
// app-wide Tier 3 budget; Slack's 429 is a *chat.RetryAfterError. It needs
// the bot's *:history scopes (channels, groups, im); without them it fails
// (missing_scope) and the outbox posts as it did before lookups.
func (c *Connector) FindPosted(ctx context.Context, l chat.Lookup) (chat.MessageRef, bool, error) {
	if l.Key == "" {
		return chat.MessageRef{}, false, nil
	}
	var oldest string
	if !l.Since.IsZero() {
		t := l.Since.Add(-findSkew)
		oldest = fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
	}
	channel, method := l.Channel, "conversations.history"
	switch {
	case l.Thread != nil:
		channel, method = l.Thread.Channel, "conversations.replies"
	case l.User != "":
		ch, err := c.dmChannel(ctx, l.User)
		if err != nil {
			return chat.MessageRef{}, false, err
		}
		channel = ch
	}
	cursor := ""
	for range findPages {
		if err := c.reads.Wait(ctx); err != nil {
			return chat.MessageRef{}, false, err
		}
		var msgs []slackgo.Message
		var err error
		if l.Thread != nil {
			msgs, _, cursor, err = c.api.GetConversationRepliesContext(ctx, &slackgo.GetConversationRepliesParameters{
				ChannelID: channel, Timestamp: l.Thread.ID, Oldest: oldest, Limit: findPage, Cursor: cursor,
				IncludeAllMetadata: true})
		} else {
			var resp *slackgo.GetConversationHistoryResponse
			resp, err = c.api.GetConversationHistoryContext(ctx, &slackgo.GetConversationHistoryParameters{
				ChannelID: channel, Oldest: oldest, Limit: findPage, Cursor: cursor, IncludeAllMetadata: true})
			if err == nil {
				msgs, cursor = resp.Messages, resp.ResponseMetaData.NextCursor
			}
		}
		if err != nil {
			return chat.MessageRef{}, false, c.apiError(method, err)
		}
		for _, m := range msgs {
			if c.posted(m, l.Key) {
				return chat.MessageRef{Surface: chat.Slack, Channel: channel, ID: m.Timestamp}, true, nil
			}
		}
		if cursor == "" {
			break
		}
	}
	return chat.MessageRef{}, false, nil
}

// posted reports whether m is the post of the message whose key is key: it carries key in its
// metadata, or shares the file of a long text (long.go). A part of a split message is remembered
// (keepPart), so that the post of the message skips it.
func (c *Connector) posted(m slackgo.Message, key string) bool {
	k, _ := m.Metadata.EventPayload["key"].(string)
	if m.Metadata.EventType == metadataType {
		if k == key {
			return true
		}
		if strings.HasPrefix(k, key+"#") {
			c.keepPart(k, m.Timestamp)
		}
	}
	return slices.ContainsFunc(m.Files, func(f slackgo.File) bool { return longtext.IsFileOf(f.Name, key) })
}
