package slacktest

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// The streaming methods, as Slack documents them:
//
//   - chat.startStream (https://docs.slack.dev/reference/methods/chat.startStream/):
//     channel and thread_ts ("streamed messages should always be replies to a
//     user request"); recipient_user_id and recipient_team_id "required when
//     streaming to channels"; optional markdown_text (at most 12,000
//     characters) and chunks. It answers the new message's channel and ts.
//   - chat.appendStream (https://docs.slack.dev/reference/methods/chat.appendStream/):
//     channel, ts, and markdown_text ("appended to the message received so
//     far") or chunks: markdown_text chunks append text, task_update chunks
//     ({id, title, status: pending | in_progress | complete | error, details})
//     show a task card, updated in place by id. Rate limit Tier 4 (100+ per
//     minute). A message that is not streaming: message_not_in_streaming_state.
//   - chat.stopStream (https://api.slack.com/methods/chat.stopStream): channel,
//     ts, optional markdown_text and chunks appended last; the message is
//     then an ordinary message (chat.update may edit it). Tier 2 (20+ per
//     minute).
//
// RefuseStreaming makes chat.startStream fail, as a workspace without
// streaming (or an app without the scope) would.

// maxStreamRunes is the documented limit of markdown_text in the streaming methods.
const maxStreamRunes = 12000

// Task is a task card of a streamed message (a task_update chunk), as last updated.
type Task struct {
	ID, Title, Status, Details string
}

// RefuseStreaming makes chat.startStream answer the Slack error code (e.g. "missing_scope").
func RefuseStreaming(code string) Option { return func(o *options) { o.refuseStream = code } }

// AppendStreamLimit sets chat.appendStream's per-app (Tier 4) limit. every <= 0 disables it.
// Default: one per 600 ms, burst 100 (Tier 4's "100+ per minute" read as a per-minute budget).
func AppendStreamLimit(every time.Duration, burst int) Option {
	return func(o *options) { o.appendStream = rate{every, max(burst, 1)} }
}

type streamChunk struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	ID      string `json:"id"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Details string `json:"details"`
}

// streamLocked serves the three streaming methods.
func (s *Server) streamLocked(method string, f url.Values, now time.Time) reply {
	text := f.Get("markdown_text")
	if utf8.RuneCountInString(text) > maxStreamRunes {
		return fail("msg_too_long")
	}
	var chunks []streamChunk
	if raw := f.Get("chunks"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &chunks); err != nil {
			return fail("invalid_chunks")
		}
		for _, c := range chunks {
			if c.Type != "markdown_text" && c.Type != "task_update" && c.Type != "plan_update" && c.Type != "blocks" {
				return fail("invalid_chunks")
			}
			if c.Type == "markdown_text" && utf8.RuneCountInString(c.Text) > maxStreamRunes {
				return fail("msg_too_long")
			}
		}
	}
	if method == "chat.startStream" {
		return s.startStreamLocked(f, now, text, chunks)
	}
	m, ok := s.byKey[key{f.Get("channel"), f.Get("ts")}]
	switch {
	case !ok:
		return fail("message_not_found")
	case !m.Streaming:
		return fail("message_not_in_streaming_state")
	case method == "chat.appendStream" && text == "" && len(chunks) == 0:
		return fail("invalid_arguments")
	}
	lim := limit{"append", s.opts.appendStream}
	if method == "chat.stopStream" {
		lim = limit{"stop", rate{3 * time.Second, 20}}
	}
	if rep, ok := s.limitLocked(now, lim); !ok {
		return rep
	}
	m.apply(text, chunks)
	m.Appends++
	if method == "chat.stopStream" {
		m.Streaming = false
	}
	return reply{body: map[string]any{"channel": m.Channel, "ts": m.TS}}
}

func (s *Server) startStreamLocked(f url.Values, now time.Time, text string, chunks []streamChunk) reply {
	if s.opts.refuseStream != "" {
		return fail(s.opts.refuseStream)
	}
	m := Message{Channel: f.Get("channel"), ThreadTS: f.Get("thread_ts"), User: BotUserID, Streaming: true,
		Recipient: f.Get("recipient_user_id")}
	switch {
	case m.Channel == "":
		return fail("channel_not_found")
	case m.ThreadTS == "" || !s.isParentLocked(m.Channel, m.ThreadTS):
		return fail("thread_not_found")
	case strings.HasPrefix(m.Channel, "C") && (m.Recipient == "" || f.Get("recipient_team_id") != TeamID):
		return fail("invalid_arguments") // a recipient is required in channels
	}
	if rep, ok := s.limitLocked(now, limit{"post:" + m.Channel, s.opts.post}); !ok {
		return rep
	}
	m.TS = s.nextTSLocked()
	m.apply(text, chunks)
	s.addLocked(&m)
	return reply{body: map[string]any{"channel": m.Channel, "ts": m.TS}}
}

// apply appends a streaming call's text and chunks to m.
func (m *Message) apply(text string, chunks []streamChunk) {
	m.Text += text
	for _, c := range chunks {
		switch c.Type {
		case "markdown_text":
			m.Text += c.Text
		case "task_update":
			m.updateTask(Task{ID: c.ID, Title: c.Title, Status: c.Status, Details: c.Details})
		}
	}
}

func (m *Message) updateTask(t Task) {
	for i := range m.Tasks {
		if m.Tasks[i].ID == t.ID {
			m.Tasks[i] = t
			return
		}
	}
	m.Tasks = append(m.Tasks, t)
}
