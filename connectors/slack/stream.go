package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	slackgo "github.com/slack-go/slack"
	"golang.org/x/time/rate"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
)

// Live messages (chat.Streamer) use Slack's native streaming: chat.startStream
// in the request's thread (to the asker: a recipient user and team are
// required in channels), chat.appendStream with the text written since the
// last append and the tool steps as task_update chunks, chat.stopStream at
// the end (https://docs.slack.dev/reference/methods/chat.startStream/,
// .../chat.appendStream/, .../chat.stopStream/). Where Slack refuses to
// stream (an older workspace, a missing scope: an error answer of
// startStream's other than a rate limit), the live message is one reply
// edited with chat.update, within the edit spacing (at most once per
// EditSpacing per message). A startStream whose outcome is unknown (a
// transport error, a timeout, a 5xx, an ok:false of Slack's side such as
// internal_error or ratelimited: Slack may have started the stream) gets
// no such reply, which would show beside the stream: the live message fails
// to open, and the answer is posted as usual by the outbox.

// Defaults of the streaming budget.
const (
	// DefaultStreamPace keeps appends to one live message apart: about two
	// per second.
	DefaultStreamPace = 500 * time.Millisecond
	// DefaultAppendEvery and DefaultAppendBurst budget chat.appendStream
	// for the whole app: Tier 4 is "100+ per minute"; 100 per minute with
	// bursts of 20 stays under it. An append over budget is not made: its
	// text stays in the coalescer and goes with the next one.
	DefaultAppendEvery = 600 * time.Millisecond
	DefaultAppendBurst = 20
	// DefaultStopEvery and DefaultStopBurst budget chat.stopStream for the
	// whole app: Tier 2 is "20+ per minute"; 18 per minute with bursts of
	// 10 stays under it. A stop waits for the budget (the outbox's
	// delivery of the answer waits with it).
	DefaultStopEvery = 3300 * time.Millisecond
	DefaultStopBurst = 10
)

// maxStreamText is the limit of markdown_text in the streaming methods.
const maxStreamText = 12000

var _ chat.Streamer = (*Connector)(nil)

// streams is what the connector knows of its open live messages.
type streams struct {
	mu       sync.Mutex
	appends  *rate.Limiter
	stops    *rate.Limiter
	fallback map[string]bool   // ts → a chat.update reply, not a native stream
	shown    map[string]string // ts → the text appended so far (native)
}

func newStreams() *streams {
	return &streams{appends: rate.NewLimiter(rate.Every(DefaultAppendEvery), DefaultAppendBurst),
		stops:    rate.NewLimiter(rate.Every(DefaultStopEvery), DefaultStopBurst),
		fallback: map[string]bool{}, shown: map[string]string{}}
}

// StreamPace implements chat.Streamer.
func (c *Connector) StreamPace() time.Duration { return DefaultStreamPace }

// OpenStream implements chat.Streamer: chat.startStream in thread t, or,
// where Slack refuses for sure (refusedStream), a reply to be edited. Any
// other error is returned: the live message does not open (threads.Live
// shows nothing more of the answer, which the outbox posts).
func (c *Connector) OpenStream(ctx context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	opts := []slackgo.MsgOption{slackgo.MsgOptionTS(t.ID)}
	if m.Recipient != "" {
		opts = append(opts, slackgo.MsgOptionRecipientUserID(m.Recipient))
		if team := c.teamID(); team != "" {
			opts = append(opts, slackgo.MsgOptionRecipientTeamID(team))
		}
	}
	var ts string
	err := c.posts.DoAhead(ctx, t.Channel, func() error { // in a thread: ahead of new parents
		var err error
		_, ts, err = c.api.StartStreamContext(ctx, t.Channel, opts...)
		return c.apiError("chat.startStream", err)
	})
	switch {
	case err == nil:
		return chat.MessageRef{Surface: chat.Slack, Channel: t.Channel, ID: ts}, nil
	case ctx.Err() != nil || !refusedStream(err):
		return chat.MessageRef{}, err
	}
	c.log.InfoContext(ctx, "streaming refused; the live message is an edited reply", "request_id", m.Request, "error", err)
	ref, err := c.Reply(ctx, t, chat.Message{Request: m.Request, Kind: "live", Text: "…"})
	if err != nil {
		return chat.MessageRef{}, err
	}
	c.live.mu.Lock()
	c.live.fallback[ref.ID] = true
	c.live.mu.Unlock()
	return ref, nil
}

// refusedStream reports whether err, chat.startStream's, says for sure that
// Slack started no stream: an answer of Slack's refusing the call (ok:false
// with its error code: not_allowed, missing_scope, unknown_method...) or an
// HTTP 4xx, but a rate limit (which is waited out instead). A transport
// error, a timeout, a 5xx, an answer cut short, or an ok:false answer that
// tells of a failure on Slack's side (inDoubtCodes) may come after Slack
// started the stream: a fallback reply then would be a second live message.
func refusedStream(err error) bool {
	var ra *chat.RetryAfterError
	var se slackgo.SlackErrorResponse
	var sc slackgo.StatusCodeError
	switch {
	case errors.As(err, &ra):
		return false
	case errors.As(err, &se):
		return !slices.Contains(inDoubtCodes, se.Err)
	case errors.As(err, &sc):
		return sc.Code >= 400 && sc.Code < 500 && sc.Code != http.StatusTooManyRequests
	}
	return false
}

// inDoubtCodes are the error codes of an ok:false answer that tell of a
// failure on Slack's side or a limit, not a refusal of the call: the
// method may have been carried out (or be, later) all the same.
var inDoubtCodes = []string{"internal_error", "fatal_error", "request_timeout", "service_unavailable", "ratelimited"}

// AppendStream implements chat.Streamer: the new text and the tool steps
// as one chat.appendStream, within the app's budget (over it: a
// *chat.RetryAfterError, and the text goes with the next append); a
// fallback reply is edited with the whole text instead.
func (c *Connector) AppendStream(ctx context.Context, ref chat.MessageRef, u chat.StreamUpdate) error {
	c.live.mu.Lock()
	fallback := c.live.fallback[ref.ID]
	c.live.mu.Unlock()
	if fallback {
		// The whole text (the status line shows the tool that runs).
		return c.Update(ctx, ref, chat.Message{Kind: "live", Text: clip.Text(u.Text, maxMessageText, clip.Runes)})
	}
	if r := c.live.appends.Reserve(); r.Delay() > 0 {
		r.Cancel()
		return &chat.RetryAfterError{After: r.Delay(), Err: errors.New("slack: chat.appendStream: over the app's budget")}
	}
	var chunks []slackgo.StreamChunk
	delta := clip.Text(u.Delta, maxStreamText, clip.Runes) // what is shown: CloseStream sets the whole text if cut
	if delta != "" {
		chunks = append(chunks, slackgo.NewMarkdownTextChunk(delta))
	}
	for _, s := range u.Steps {
		tu := slackgo.NewTaskUpdateChunk(s.ID, s.Name)
		tu.Status = slackgo.TaskCardStatus(s.Status)
		if s.Took > 0 {
			tu.Details = "took " + s.Took.Round(time.Millisecond).String()
		}
		chunks = append(chunks, tu)
	}
	if len(chunks) == 0 {
		return nil
	}
	_, _, err := c.api.AppendStreamContext(ctx, ref.Channel, ref.ID, slackgo.MsgOptionChunks(chunks...))
	if err = c.apiError("chat.appendStream", err); err == nil {
		c.live.mu.Lock()
		c.live.shown[ref.ID] += delta
		c.live.mu.Unlock()
	}
	return err
}

// CloseStream implements chat.Streamer: chat.stopStream with the rest of
// m.Text when what was streamed begins it; otherwise (another text, or a
// stream this process did not write) the stream is stopped and its text
// replaced with chat.update. A fallback reply is edited. Repeating it puts
// m.Text in the message again. What the connector knows of the live message
// is forgotten when it ends: closed, or failed for good (chat.ErrPermanent:
// the outbox drops the close); after any other failure the outbox closes it
// again, and that needs it.
func (c *Connector) CloseStream(ctx context.Context, ref chat.MessageRef, m chat.Message) (err error) {
	defer func() {
		if err == nil || errors.Is(err, chat.ErrPermanent) {
			c.forget(ref.ID)
		}
	}()
	c.live.mu.Lock()
	fallback := c.live.fallback[ref.ID]
	shown, known := c.live.shown[ref.ID]
	c.live.mu.Unlock()
	if fallback {
		return c.Update(ctx, ref, chat.Message{Request: m.Request, Kind: m.Kind, Text: m.Text})
	}
	var opts []slackgo.MsgOption
	rest, prefix := strings.CutPrefix(m.Text, shown)
	if known && prefix && rest != "" {
		if clip.Text(rest, maxStreamText, clip.Runes) != rest {
			prefix = false // too long for the stop: stop, then set the whole text
		} else {
			opts = append(opts, slackgo.MsgOptionMarkdownText(rest))
		}
	}
	if err := c.live.stops.Wait(ctx); err != nil {
		return err
	}
	_, _, err = c.api.StopStreamContext(ctx, ref.Channel, ref.ID, opts...)
	err = c.apiError("chat.stopStream", err)
	var se slackgo.SlackErrorResponse
	switch {
	case err != nil && errors.As(err, &se) && se.Err == "message_not_in_streaming_state":
		known, prefix = false, false // stopped already (a repeat, a restart): set the text
	case err != nil:
		return err
	}
	if !known || !prefix {
		if err := c.Update(ctx, ref, chat.Message{Request: m.Request, Kind: m.Kind, Text: m.Text}); err != nil {
			return fmt.Errorf("slack: closing live message %s: %w", ref.ID, err)
		}
	}
	return nil
}

// forget drops what the connector knows of live message ts.
func (c *Connector) forget(ts string) {
	c.live.mu.Lock()
	delete(c.live.fallback, ts)
	delete(c.live.shown, ts)
	c.live.mu.Unlock()
}
