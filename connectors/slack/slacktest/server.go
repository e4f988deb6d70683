package slacktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// Identities the fake reports from auth.test and puts into the payloads it builds.
const (
	TeamID            = "T0TEST"                       // workspace ID
	AppID             = "A0TEST"                       // app ID (hello connection_info, api_app_id)
	BotID             = "B0TEST"                       // bot_id of the bot's messages
	BotUserID         = "U0BOT"                        // user ID of the bot; author of Web API posts
	VerificationToken = "slacktest-verification-token" // legacy "token" field of built payloads
	DefaultBotToken   = "xoxb-slacktest"               // bot token accepted unless Tokens overrides it
	DefaultAppToken   = "xapp-slacktest"               // app-level token accepted by apps.connections.open
)

// maxTextRunes is the limit Slack documents for a message's text (over 40,000 characters it is truncated;
// the fake answers msg_too_long). Block Kit's limits are CheckBlocks's (blocks.go).
const maxTextRunes = 40000

// ErrClosed is returned by operations on a closed Server.
var ErrClosed = errors.New("slacktest: server closed")

// Message is a channel message as the fake recorded it.
type Message struct {
	Channel    string
	TS         string
	ThreadTS   string          // parent ts for a thread reply, "" for a top-level message
	User       string          // author (BotUserID for Web API posts); for ephemerals, the recipient
	Text       string          // current text
	BlocksJSON json.RawMessage // current blocks as sent, nil if never sent
	Blocks     []slack.Block   // BlocksJSON parsed by slack-go
	Broadcast  bool            // reply_broadcast=true
	// Metadata is the message metadata as sent (chat.postMessage's or chat.update's "metadata"), nil if
	// none. conversations.history and conversations.replies return it only with include_all_metadata.
	Metadata *slack.SlackMetadata
	Updates  []Revision // content after each chat.update, oldest first
	// Streaming: a chat.startStream message not yet stopped (stream.go);
	// Recipient its recipient_user_id, Tasks its task cards, Appends the
	// appendStream and stopStream calls it took.
	Streaming bool
	Recipient string
	Tasks     []Task
	Appends   int
	// Files are the files a files.completeUploadExternal shared in this message (files.go).
	Files []File
}

// Revision is the content of a message after one chat.update.
type Revision struct {
	Text       string
	BlocksJSON json.RawMessage
	At         time.Time // server clock when the update was applied
}

// Option configures a Server.
type Option func(*options)

type rate struct {
	every time.Duration
	burst int
}

type options struct {
	botToken, appToken string
	now                func() time.Time
	post, update, read rate
	strictEdits        bool
	ping               time.Duration
	refuseStream       string
	appendStream       rate
	roundTrip          time.Duration
}

// Tokens sets the accepted bot token (Web API) and app-level token (apps.connections.open).
func Tokens(bot, app string) Option { return func(o *options) { o.botToken, o.appToken = bot, app } }

// Clock injects the clock used for ts values and rate limits (default time.Now).
func Clock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// DefaultPostBurst is the burst the fake's chat.postMessage limit takes by default: Slack documents
// about one message per second per channel and that it tolerates short bursts without bounding them;
// two posts at once is the least that is a burst, so the fake takes exactly that, the strictest
// reading of the documentation. A connector without a per-channel pacer fails on its third post
// into a channel in a second; one that spaces posts from their starts with a floor after the end
// (ratelimit.NewStartSpacer) never trips it, whatever the latency of each call.
const DefaultPostBurst = 2

// PostMessageLimit sets chat.postMessage's per-channel limit: one message per every, with bursts of up
// to burst messages (GCRA). every <= 0 disables it. Default: 1 per second, burst DefaultPostBurst; a
// burst of 1 is stricter than Slack (any two posts closer than every: a 429). Only chat.postMessage,
// chat.update and the reads (ReadLimit) are limited.
func PostMessageLimit(every time.Duration, burst int) Option {
	return func(o *options) { o.post = rate{every, max(burst, 1)} }
}

// UpdateLimit sets chat.update's per-app (Tier 3) limit. every <= 0 disables it.
// Default: one per 1.2 s, burst 50, i.e. Tier 3's "50+ per minute" read as a per-minute budget.
func UpdateLimit(every time.Duration, burst int) Option {
	return func(o *options) { o.update = rate{every, max(burst, 1)} }
}

// ReadLimit sets the per-app limit of each of conversations.history and conversations.replies (Tier 3,
// counted per method). every <= 0 disables it. Default: one per 1.2 s, burst 50, like UpdateLimit.
func ReadLimit(every time.Duration, burst int) Option {
	return func(o *options) { o.read = rate{every, max(burst, 1)} }
}

// RoundTrip makes every Web API call take d more: d/2 on its way to the fake, before the fake counts
// it (limits, ts), and d/2 on its way back, after (default 0: only loopback's own latency). It plays
// the network between a connector and Slack.
func RoundTrip(d time.Duration) Option { return func(o *options) { o.roundTrip = d } }

// StrictEditSpacing makes chat.update of one message less than 1 s after its previous update a 429
// (default on: our design coalesces edits to >= 1 s apart).
func StrictEditSpacing(on bool) Option { return func(o *options) { o.strictEdits = on } }

// PingInterval sets how often the fake sends WebSocket pings on Socket Mode connections (default 5 s,
// well inside slack-go's 30 s ping timeout). d <= 0 disables pings; then set
// socketmode.OptionPingInterval longer than the test.
func PingInterval(d time.Duration) Option { return func(o *options) { o.ping = d } }

type key struct{ channel, ts string }

type failure struct {
	status     int
	retryAfter time.Duration
	slackErr   string
}

// Server is a fake Slack Web API and Socket Mode endpoint on 127.0.0.1. It is safe for concurrent use.
// It is stricter than Slack where that exposes bugs: thread_ts must name a top-level message of the
// same channel (else thread_not_found), and over-long text is rejected rather than truncated.
type Server struct {
	opts options
	http *httptest.Server
	wg   sync.WaitGroup // websocket handlers

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	closed      bool
	lastTS      int64 // microseconds
	msgs        []*Message
	byKey       map[key]*Message
	ephemerals  []*Message
	opened      map[string]bool
	tat         map[string]time.Time // GCRA theoretical arrival times per limit key
	calls       map[string]int
	rateLimited map[string]int
	failures    map[string][]failure
	lose        map[string]int // calls whose answers are lost (LoseNextAnswer), per method
	files       []*File        // uploads (files.go)
	socketState
}

// NewServer starts a fake Slack on a random 127.0.0.1 port. Call Close when done.
func NewServer(opts ...Option) *Server {
	s := &Server{
		opts: options{
			botToken: DefaultBotToken, appToken: DefaultAppToken, now: time.Now,
			post: rate{time.Second, DefaultPostBurst}, update: rate{time.Minute / 50, 50}, read: rate{time.Minute / 50, 50},
			strictEdits: true, ping: 5 * time.Second, appendStream: rate{600 * time.Millisecond, 100},
		},
		changed: make(chan struct{}), byKey: map[key]*Message{}, opened: map[string]bool{},
		tat: map[string]time.Time{}, calls: map[string]int{}, rateLimited: map[string]int{},
		failures: map[string][]failure{}, lose: map[string]int{},
	}
	for _, o := range opts {
		o(&s.opts)
	}
	s.initSocket()
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.serveAPI)
	mux.HandleFunc("/link/", s.serveSocket)
	mux.HandleFunc("/upload/", s.serveUpload)
	s.http = httptest.NewServer(mux)
	return s
}

// APIURL is the Web API base URL for slack.OptionAPIURL (ends with "/").
func (s *Server) APIURL() string { return s.http.URL + "/api/" }

// Close closes every Socket Mode connection and the HTTP server and waits for its goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.notifyLocked()
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.ws.Close()
	}
	s.http.Close()
	s.wg.Wait()
}

// notifyLocked wakes every WaitFor. s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Changed returns a channel closed at the server's next change (what wakes WaitFor), for a wait on
// the server and something else at once: take it, check the condition, then wait on it.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// WaitFor blocks until cond(s) is true, re-evaluating it after every change to the server's state.
// cond must not block; it may call any Server accessor.
func (s *Server) WaitFor(ctx context.Context, cond func(*Server) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("slacktest: wait for condition: %w", context.Cause(ctx))
		}
	}
}

// Calls reports how many requests method received, including rejected ones.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Methods lists every Web API method that received a request, sorted.
func (s *Server) Methods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := make([]string, 0, len(s.calls))
	for m := range s.calls {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	return ms
}

// RateLimited reports how many HTTP 429 responses method got, from limits and from FailNext.
func (s *Server) RateLimited(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimited[method]
}

// Messages returns a snapshot of every channel message (bot posts and AddUserMessage) in ts order.
func (s *Server) Messages() []Message { return s.snapshot(&s.msgs) }

// Ephemerals returns a snapshot of every chat.postEphemeral message; User is the recipient.
func (s *Server) Ephemerals() []Message { return s.snapshot(&s.ephemerals) }

func (s *Server) snapshot(list *[]*Message) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(*list))
	for i, m := range *list {
		out[i] = m.clone()
	}
	return out
}

// Thread returns the parent (channel, ts) followed by its replies, like conversations.replies;
// nil if there is no such message.
func (s *Server) Thread(channel, ts string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs {
		if m.Channel == channel && (m.TS == ts || m.ThreadTS == ts) {
			out = append(out, m.clone())
		}
	}
	return out
}

// Message returns the current content of the message (channel, ts).
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byKey[key{channel, ts}]
	if !ok {
		return Message{}, false
	}
	return m.clone(), true
}

// AddUserMessage records a message a human posted (so the bot can reply in its thread) and returns
// its ts; use the ts in AppMentionEvent or MessageEvent.
func (s *Server) AddUserMessage(channel, user, text, threadTS string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if threadTS != "" && !s.isParentLocked(channel, threadTS) {
		return "", fmt.Errorf("slacktest: add user message: thread %s/%s: thread_not_found", channel, threadTS)
	}
	m := &Message{Channel: channel, TS: s.nextTSLocked(), ThreadTS: threadTS, User: user, Text: text}
	s.addLocked(m)
	return m.TS, nil
}

func (m *Message) clone() Message {
	c := *m
	c.BlocksJSON = append(json.RawMessage(nil), m.BlocksJSON...)
	c.Blocks = append([]slack.Block(nil), m.Blocks...)
	c.Updates = append([]Revision(nil), m.Updates...)
	c.Tasks = append([]Task(nil), m.Tasks...)
	c.Files = append([]File(nil), m.Files...)
	if m.Metadata != nil {
		md := *m.Metadata
		c.Metadata = &md
	}
	return c
}

func (s *Server) addLocked(m *Message) {
	s.msgs = append(s.msgs, m)
	s.byKey[key{m.Channel, m.TS}] = m
	s.notifyLocked()
}

func (s *Server) isParentLocked(channel, ts string) bool {
	m, ok := s.byKey[key{channel, ts}]
	return ok && m.ThreadTS == ""
}

// nextTSLocked returns a ts from the clock, strictly greater than every earlier one.
func (s *Server) nextTSLocked() string {
	s.lastTS = max(s.lastTS+1, s.opts.now().UnixMicro())
	return fmt.Sprintf("%d.%06d", s.lastTS/1e6, s.lastTS%1e6)
}

// TSTime is the time a ts of the fake stands for: when the fake took the call that made the message
// (on its clock, to the microsecond).
func TSTime(ts string) (time.Time, error) {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, fmt.Errorf("slacktest: ts %q: %w", ts, err)
	}
	return time.UnixMicro(s*1e6 + us), nil
}

// reply is one Web API answer; err != "" means ok:false; lost: none is sent (LoseNextAnswer).
type reply struct {
	status     int
	retryAfter time.Duration
	err        string
	body       map[string]any
	lost       bool
}

func fail(code string) reply { return reply{err: code} }

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	rep := reply{err: "invalid_form_data"}
	if err := r.ParseForm(); err == nil {
		time.Sleep(s.opts.roundTrip / 2) // plays the way to Slack
		rep = s.handle(method, r)
		time.Sleep(s.opts.roundTrip / 2) // and back
	}
	if rep.lost {
		panic(http.ErrAbortHandler) // the server closes the connection, answering nothing
	}
	if rep.status == http.StatusTooManyRequests && rep.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((rep.retryAfter+time.Second-1)/time.Second)))
	}
	if rep.status != 0 && rep.status != http.StatusOK {
		http.Error(w, http.StatusText(rep.status), rep.status)
		return
	}
	body := rep.body
	if rep.err != "" {
		body = map[string]any{"ok": false, "error": rep.err}
	} else {
		body["ok"] = true
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

func (s *Server) handle(method string, r *http.Request) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	s.calls[method]++
	rep := s.dispatchLocked(method, r)
	if s.lose[method] > 0 {
		s.lose[method]--
		rep.lost = true
	}
	if rep.status == http.StatusTooManyRequests {
		s.rateLimited[method]++
	}
	return rep
}

func (s *Server) dispatchLocked(method string, r *http.Request) reply {
	if q := s.failures[method]; len(q) > 0 {
		s.failures[method] = q[1:]
		if q[0].slackErr != "" {
			return fail(q[0].slackErr)
		}
		return reply{status: q[0].status, retryAfter: q[0].retryAfter}
	}
	tok := r.Form.Get("token")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		tok = b
	}
	want := s.opts.botToken
	if method == "apps.connections.open" {
		want = s.opts.appToken
	}
	switch {
	case tok == "":
		return fail("not_authed")
	case tok != want:
		return fail("invalid_auth")
	}
	f, now := r.Form, s.opts.now()
	switch method {
	case "auth.test":
		return reply{body: map[string]any{"url": "https://slacktest.slack.com/", "team": "slacktest",
			"user": "bot", "team_id": TeamID, "user_id": BotUserID, "bot_id": BotID}}
	case "chat.postMessage":
		return s.postMessageLocked(f, now)
	case "chat.update":
		return s.updateLocked(f, now)
	case "chat.startStream", "chat.appendStream", "chat.stopStream":
		return s.streamLocked(method, f, now)
	case "chat.postEphemeral":
		m, code := s.parseLocked(f)
		if code == "" && f.Get("user") == "" {
			code = "user_not_found"
		}
		if code != "" {
			return fail(code)
		}
		m.User, m.TS = f.Get("user"), s.nextTSLocked()
		s.ephemerals = append(s.ephemerals, &m)
		return reply{body: map[string]any{"message_ts": m.TS}}
	case "conversations.open":
		return s.openLocked(f)
	case "conversations.history", "conversations.replies":
		if rep, ok := s.limitLocked(now, limit{"read:" + method, s.opts.read}); !ok {
			return rep
		}
		if method == "conversations.history" {
			return s.historyLocked(f)
		}
		return s.repliesLocked(f)
	case "files.getUploadURLExternal":
		return s.uploadURLLocked(f)
	case "files.completeUploadExternal":
		return s.completeUploadLocked(f)
	case "apps.connections.open":
		return reply{body: map[string]any{"url": s.issueTicketLocked()}}
	}
	return fail("unknown_method")
}

// parseLocked validates the content fields shared by chat.postMessage, chat.postEphemeral and chat.update.
func (s *Server) parseLocked(f url.Values) (Message, string) {
	m := Message{Channel: f.Get("channel"), ThreadTS: f.Get("thread_ts"), Text: f.Get("text")}
	if m.Channel == "" {
		return m, "channel_not_found"
	}
	if utf8.RuneCountInString(m.Text) > maxTextRunes {
		return m, "msg_too_long"
	}
	if raw := f.Get("blocks"); raw != "" {
		var bs slack.Blocks
		if err := json.Unmarshal([]byte(raw), &bs); err != nil || CheckBlocks([]byte(raw)) != nil {
			return m, "invalid_blocks"
		}
		m.BlocksJSON, m.Blocks = json.RawMessage(raw), bs.BlockSet
	}
	if raw, ok := f["metadata"]; ok {
		var md slack.SlackMetadata
		if err := json.Unmarshal([]byte(raw[0]), &md); err != nil || md.EventType == "" || md.EventPayload == nil {
			return m, "invalid_metadata_format"
		}
		m.Metadata = &md
	}
	if m.ThreadTS != "" && !s.isParentLocked(m.Channel, m.ThreadTS) {
		return m, "thread_not_found"
	}
	return m, ""
}

func (s *Server) postMessageLocked(f url.Values, now time.Time) reply {
	m, code := s.parseLocked(f)
	if code == "" && m.Text == "" && m.Blocks == nil && f.Get("attachments") == "" {
		code = "no_text"
	}
	if code != "" {
		return fail(code)
	}
	if rep, ok := s.limitLocked(now, limit{"post:" + m.Channel, s.opts.post}); !ok {
		return rep
	}
	m.TS, m.User, m.Broadcast = s.nextTSLocked(), BotUserID, f.Get("reply_broadcast") == "true"
	s.addLocked(&m)
	return reply{body: map[string]any{"channel": m.Channel, "ts": m.TS, "message": wireMessage(&m, true)}}
}

func (s *Server) updateLocked(f url.Values, now time.Time) reply {
	m, ok := s.byKey[key{f.Get("channel"), f.Get("ts")}]
	if !ok {
		return fail("message_not_found")
	}
	if m.User != BotUserID {
		return fail("cant_update_message")
	}
	upd, code := s.parseLocked(f)
	if code != "" {
		return fail(code)
	}
	ls := []limit{{"update", s.opts.update}}
	if s.opts.strictEdits {
		ls = append(ls, limit{"edit:" + m.Channel + "/" + m.TS, rate{time.Second, 1}})
	}
	if rep, ok := s.limitLocked(now, ls...); !ok {
		return rep
	}
	if _, ok := f["text"]; ok {
		m.Text = upd.Text
	}
	if _, ok := f["blocks"]; ok {
		m.BlocksJSON, m.Blocks = upd.BlocksJSON, upd.Blocks
	}
	if upd.Metadata != nil {
		m.Metadata = upd.Metadata
	}
	m.Updates = append(m.Updates, Revision{Text: m.Text, BlocksJSON: m.BlocksJSON, At: now})
	// As recorded (java-slack-sdk's chat.update sample): no ts, app_id or metadata.
	updated := wireMessage(m, false)
	delete(updated, "ts")
	delete(updated, "app_id")
	return reply{body: map[string]any{"channel": m.Channel, "ts": m.TS, "text": m.Text, "message": updated}}
}

func (s *Server) openLocked(f url.Values) reply {
	id := f.Get("channel")
	if u := f.Get("users"); id == "" && u != "" {
		id = "D" + strings.ReplaceAll(u, ",", "") // one user: a DM "D"+user; several: a made-up MPIM ID
	}
	if id == "" {
		return fail("users_list_not_supplied")
	}
	already := s.opened[id]
	s.opened[id] = true
	return reply{body: map[string]any{"channel": map[string]any{"id": id, "is_im": id[0] == 'D'}, "already_open": already}}
}
