package slack

import (
	"context"
	"fmt"

	slackgo "github.com/slack-go/slack"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/longtext"
)

// A text message too long for one Slack message (maxMessageText characters once escaped) is split by
// longtext: up to longtext.MaxParts replies, else the whole text uploaded as a Markdown file
// (files.getUploadURLExternal, the upload, files.completeUploadExternal: slack-go's UploadFileContext)
// shared in the thread with a comment that says so. Each part carries its own key in its metadata
// (longtext.Key: the last part the message's own), so the outbox's lookup of an effect in doubt
// finds the message only when every part went out; the file is recognised by its name
// (longtext.IsFileOf). The parts already posted for an effect are remembered (parts): a retry after a
// failure halfway, or after a lookup that found some of them, posts only the rest.

// maxRemembered bounds the posts of split messages the connector remembers.
const maxRemembered = 10000

// keepPart remembers a post made (or found) of a split message whose last post has not gone out
// yet (Connector.sent: post key → ts). In memory: after a restart, the outbox's lookup of the effect
// in doubt finds them again (FindPosted).
func (c *Connector) keepPart(key, ts string) {
	if key != "" {
		c.sent.Put(key, ts)
	}
}

// escapedCost is what a character costs of a message's text once Mrkdwn escaped it.
func escapedCost(r rune) int {
	switch r {
	case '&':
		return len("&amp;")
	case '<', '>':
		return len("&lt;")
	}
	return 1
}

// FitsLive implements chat.LiveBound: a live message is closed with its whole text (chat.update), so
// that text must fit one message.
func (c *Connector) FitsLive(text string) bool {
	return longtext.Fits(text, maxMessageText-1, escapedCost)
}

var _ chat.LiveBound = (*Connector)(nil)

// plan is how m goes out: one post unless m is a text too long for one message.
func plan(m chat.Message) longtext.Plan {
	if m.Card != nil || m.Text == "" {
		return longtext.Plan{Parts: []string{m.Text}}
	}
	return longtext.Split(m.Text, maxMessageText-1, escapedCost, m.Request, m.IdempotencyKey)
}

// postPlan posts m into channel (a reply in thread when it is not "", a direct message otherwise;
// broadcast: the first post also in the channel), ahead of new thread parents, as p says, skipping the posts of m already made, and returns the ts of the last post.
func (c *Connector) postPlan(ctx context.Context, channel, thread string, m chat.Message, p longtext.Plan, broadcast bool) (string, error) {
	if p.File != nil {
		return c.postFile(ctx, channel, thread, m, p)
	}
	var ts string
	for i, text := range p.Parts {
		part := m
		part.Text, part.IdempotencyKey = text, longtext.Key(m.IdempotencyKey, i, len(p.Parts))
		if prev, ok := c.sent.Get(part.IdempotencyKey); ok && part.IdempotencyKey != m.IdempotencyKey {
			ts = prev
			continue
		}
		opts := c.content(part, false)
		if thread != "" {
			opts = append(opts, slackgo.MsgOptionTS(thread))
		}
		if broadcast && i == 0 {
			opts = append(opts, slackgo.MsgOptionBroadcast())
		}
		var err error
		if ts, err = c.post(ctx, channel, true, opts...); err != nil {
			return "", err
		}
		if i < len(p.Parts)-1 {
			c.keepPart(part.IdempotencyKey, ts)
		}
	}
	c.sent.DeletePrefix(m.IdempotencyKey + "#") // its parts: the message went out whole
	return ts, nil
}

// postFile uploads p's file into channel (thread) with p's message as its comment.
func (c *Connector) postFile(ctx context.Context, channel, thread string, m chat.Message, p longtext.Plan) (string, error) {
	err := c.posts.DoAhead(ctx, channel, func() error {
		_, err := c.api.UploadFileContext(ctx, slackgo.UploadFileParameters{
			Filename: p.File.Name, Title: p.File.Title, Content: p.File.Content, FileSize: len(p.File.Content),
			Channel: channel, ThreadTimestamp: thread, InitialComment: Mrkdwn(p.Parts[0], maxMessageText),
			SnippetType: "markdown",
		})
		return c.apiError("files.upload", err)
	})
	if err != nil {
		return "", err
	}
	// completeUploadExternal does not name the message that shares the file: look for it. Not
	// found (yet), the post is in doubt: the outbox's retry looks for it again before it posts.
	l := chat.Lookup{Key: m.IdempotencyKey, Channel: channel}
	if thread != "" {
		l.Thread = &chat.ThreadRef{Surface: chat.Slack, Channel: channel, ID: thread}
	}
	ref, found, err := c.FindPosted(ctx, l)
	switch {
	case err != nil:
		return "", err
	case !found:
		return "", fmt.Errorf("slack: files.completeUploadExternal: the message sharing %s is not in the channel yet", p.File.Name)
	}
	return ref.ID, nil
}
