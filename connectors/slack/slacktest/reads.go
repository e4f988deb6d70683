package slacktest

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
)

// historyLocked is conversations.history: the channel's top-level messages (and thread broadcasts)
// between oldest and latest, newest first, limit (default 100, at most 999) to a page; the cursor of
// the next page names the last ts returned.
func (s *Server) historyLocked(f url.Values) reply {
	channel := f.Get("channel")
	if channel == "" {
		return fail("channel_not_found")
	}
	q, code := parseRead(f, 100, 999)
	if code != "" {
		return fail(code)
	}
	var page []map[string]any
	more := false
	for i := len(s.msgs) - 1; i >= 0; i-- {
		m := s.msgs[i]
		if m.Channel != channel || (m.ThreadTS != "" && !m.Broadcast) || !q.inRange(m.TS) ||
			(q.after >= 0 && tsMicros(m.TS) >= q.after) {
			continue
		}
		if len(page) == q.limit {
			more = true
			break
		}
		page = append(page, wireMessage(m, q.metadata))
	}
	return readReply(page, more)
}

// repliesLocked is conversations.replies: the thread of ts (the parent, then its replies, oldest
// first) between oldest and latest, limit (default and most 1000) to a page; ts may name a reply of
// the thread. The cursor of the next page names the last ts returned.
func (s *Server) repliesLocked(f url.Values) reply {
	channel, ts := f.Get("channel"), f.Get("ts")
	root, ok := s.byKey[key{channel, ts}]
	if !ok {
		return fail("thread_not_found")
	}
	if root.ThreadTS != "" {
		ts = root.ThreadTS
	}
	q, code := parseRead(f, 1000, 1000)
	if code != "" {
		return fail(code)
	}
	var page []map[string]any
	more := false
	for _, m := range s.msgs {
		if m.Channel != channel || (m.TS != ts && m.ThreadTS != ts) || !q.inRange(m.TS) ||
			(q.after >= 0 && tsMicros(m.TS) <= q.after) {
			continue
		}
		if len(page) == q.limit {
			more = true
			break
		}
		page = append(page, wireMessage(m, q.metadata))
	}
	return readReply(page, more)
}

// read is the common arguments of conversations.history and conversations.replies.
type read struct {
	oldest, latest int64 // microseconds; latest < 0: now
	inclusive      bool
	limit          int
	metadata       bool  // include_all_metadata
	after          int64 // the cursor's ts (the last one of the previous page), -1 if none
}

func parseRead(f url.Values, def, most int) (read, string) {
	q := read{latest: -1, after: -1, limit: def, inclusive: isTrue(f.Get("inclusive")),
		metadata: isTrue(f.Get("include_all_metadata"))}
	if v := f.Get("oldest"); v != "" {
		if q.oldest = tsMicros(v); q.oldest < 0 {
			return q, "invalid_ts_oldest"
		}
	}
	if v := f.Get("latest"); v != "" {
		if q.latest = tsMicros(v); q.latest < 0 {
			return q, "invalid_ts_latest"
		}
	}
	if v := f.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return q, "invalid_limit"
		}
		q.limit = min(n, most)
	}
	if c := f.Get("cursor"); c != "" {
		b, err := base64.StdEncoding.DecodeString(c)
		ts, ok := strings.CutPrefix(string(b), "next_ts:")
		if q.after = tsMicros(ts); err != nil || !ok || q.after < 0 {
			return q, "invalid_cursor"
		}
	}
	return q, ""
}

func (q read) inRange(ts string) bool {
	t := tsMicros(ts)
	if q.inclusive {
		return t >= q.oldest && (q.latest < 0 || t <= q.latest)
	}
	return t > q.oldest && (q.latest < 0 || t < q.latest)
}

// readReply is a page of messages, with the cursor of the next one when there is more.
func readReply(page []map[string]any, more bool) reply {
	body := map[string]any{"messages": page, "has_more": more}
	if page == nil {
		body["messages"] = []any{}
	}
	if more {
		last := page[len(page)-1]["ts"].(string)
		body["response_metadata"] = map[string]any{"next_cursor": base64.StdEncoding.EncodeToString([]byte("next_ts:" + last))}
	}
	return reply{body: body}
}

func isTrue(v string) bool { return v == "1" || v == "true" }

// tsMicros parses a Slack ts ("1700000000.000100", or whole seconds) into microseconds; -1 if it
// is not one.
func tsMicros(ts string) int64 {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s < 0 || len(frac) > 6 {
		return -1
	}
	var us int64
	if frac != "" {
		f, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil || f < 0 {
			return -1
		}
		us = f
	}
	return s*1e6 + us
}

// wireMessage is the message object Slack returns from chat.postMessage and chat.update, and in the
// messages of conversations.history and conversations.replies; metadata says whether it carries the
// message's metadata (the reads: only with include_all_metadata).
func wireMessage(m *Message, metadata bool) map[string]any {
	w := map[string]any{"type": "message", "user": m.User, "text": m.Text, "ts": m.TS}
	if m.User == BotUserID {
		w["bot_id"], w["app_id"] = BotID, AppID
	}
	if m.ThreadTS != "" {
		w["thread_ts"] = m.ThreadTS
		if m.Broadcast {
			w["subtype"] = "thread_broadcast"
		}
	}
	if m.BlocksJSON != nil {
		w["blocks"] = m.BlocksJSON
	}
	if m.Files != nil {
		w["files"] = wireFiles(m.Files)
	}
	if metadata && m.Metadata != nil {
		w["metadata"] = m.Metadata
	}
	return w
}
