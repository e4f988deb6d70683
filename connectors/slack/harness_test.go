package slack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/testbin"

	slackgo "github.com/slack-go/slack"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// bridgeBin is the bridge binary, built once; its demo-agent subcommand is
// the agent of these tests.
var bridgeBin string

func TestMain(m *testing.M) { testbin.Main(m.Run, &bridgeBin) }

// Identities of the tests.
const (
	channel = "C0123"
	owner   = "UOWNER"
	member  = "U1"
	secret  = "slacktest-signing-secret"
	waitFor = 60 * time.Second
)

// setup describes a harness.
type setup struct {
	mode     string
	agents   []string
	fake     []slacktest.Option
	conn     func(*slack.Options)
	wrapHTTP func(http.RoundTripper) http.RoundTripper
	// handler, if set, wraps the core's chat.Handler as the connector sees
	// it (a slow or stuck core).
	handler func(chat.Handler) chat.Handler
	// clock, if set, is the bridge's clock (a fake one: tests that expire).
	clock clock.Clock
	// channels are more Slack channels, each the room of its own name.
	channels []string
}

// Fast pacing for tests that post a lot: the fake allows one post per
// channel every fakePost (with Slack's tolerance of a short burst,
// slacktest.DefaultPostBurst), the connector starts posts postSpacing
// apart (more, a margin for a loaded machine: the fake never answers 429).
const (
	fakePost    = 10 * time.Millisecond
	postSpacing = 15 * time.Millisecond
)

// fast makes s post at the fast pacing.
func fast(s setup) setup {
	s.fake = append(s.fake, slacktest.PostMessageLimit(fakePost, slacktest.DefaultPostBurst), slacktest.UpdateLimit(5*time.Millisecond, 50))
	conn := s.conn
	s.conn = func(o *slack.Options) {
		o.PostSpacing, o.UpdateEvery, o.UpdateBurst = postSpacing, 6*time.Millisecond, 40
		if conn != nil {
			conn(o)
		}
	}
	return s
}

// harness is the whole bridge (core.New on a bolt file, running the demo
// agent) in this process, with the Slack connector talking to a fake Slack.
type harness struct {
	t    testing.TB
	s    setup
	fake *slacktest.Server
	dir  string
	log  *slog.Logger
	logs *logBuffer

	// of the running instance
	bridge *coretest.Bridge
	db     *bolt.DB
	svc    *requests.Service
	del    *delegation.Service
	conn   *slack.Connector
	events atomic.Int64
}

// harnessConfig is the bridge's config: one room on the test channel.
const harnessConfig = `
owner: acme
owners: [slack:UOWNER]
data_dir: %DIR%
slack: {mode: %MODE%, bot_token: xoxb-test, app_token: xapp-test, signing_secret: test}
rooms:
  - {name: backend, slack_channel: C0123, agents: [%AGENTS%], approvers: [slack:UOWNER]}
%ROOMS%agents:
%AGENTDEFS%`

func newHarness(t testing.TB, s setup) *harness {
	t.Helper()
	if len(s.agents) == 0 {
		s.agents = []string{"coder"}
	}
	h := &harness{t: t, s: s, dir: t.TempDir(), logs: &logBuffer{}}
	h.log = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.fake = slacktest.NewServer(s.fake...)
	t.Cleanup(func() {
		if h.bridge != nil {
			h.bridge.Stop()
		}
		h.fake.Close()
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs.String())
		}
	})
	h.start()
	return h
}

// config is the harness's config text.
func (h *harness) config() string {
	var defs strings.Builder
	for _, name := range h.s.agents {
		fmt.Fprintf(&defs, "  %s: {kind: exec, command: [%q, demo-agent], workdir: %q}\n", name, bridgeBin, h.dir)
	}
	var rooms strings.Builder
	for _, ch := range h.s.channels {
		fmt.Fprintf(&rooms, "  - {name: %s, slack_channel: %s, agents: [%%AGENTS%%], approvers: [slack:UOWNER]}\n", strings.ToLower(ch), ch)
	}
	c := strings.ReplaceAll(harnessConfig, "%ROOMS%", rooms.String())
	c = strings.ReplaceAll(c, "%AGENTS%", strings.Join(h.s.agents, ", "))
	c = strings.ReplaceAll(c, "%MODE%", h.s.mode)
	return strings.ReplaceAll(c, "%AGENTDEFS%", defs.String())
}

// start runs an instance of the bridge on the harness's bolt file.
func (h *harness) start() {
	t := h.t
	t.Helper()
	opts := slack.Options{Mode: h.s.mode, BotToken: slacktest.DefaultBotToken, AppToken: slacktest.DefaultAppToken,
		SigningSecret: secret, APIURL: h.fake.APIURL(), Log: h.log, PingInterval: time.Hour}
	if h.s.wrapHTTP != nil {
		opts.HTTPClient = &http.Client{Transport: h.s.wrapHTTP(http.DefaultTransport)}
	}
	if h.s.conn != nil {
		h.s.conn(&opts)
	}
	conn, err := slack.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var c chat.Connector = conn
	if h.s.handler != nil {
		c = wrappedCore{conn, h.s.handler}
	}
	h.bridge = coretest.Start(t, coretest.Options{Config: h.config(), Dir: h.dir, Log: h.log, Clock: h.s.clock,
		Connectors: func() []chat.Connector { return []chat.Connector{c} }})
	h.db, h.svc, h.del, h.conn = h.bridge.DB, h.bridge.Requests(), h.bridge.Delegation(), conn
	if h.s.mode == slack.ModeSocket {
		h.waitFake("a socket mode connection", func(s *slacktest.Server) bool { return s.Connections() > 0 })
	}
}

// wrappedCore is the Slack connector seeing the core through wrap (a slow
// or stuck core), in both modes.
type wrappedCore struct {
	*slack.Connector
	wrap func(chat.Handler) chat.Handler
}

func (w wrappedCore) Run(ctx context.Context, h chat.Handler) error {
	return w.Connector.Run(ctx, w.wrap(h))
}

func (w wrappedCore) Routes(h chat.Handler) map[string]http.Handler {
	return w.Connector.Routes(w.wrap(h))
}

// stop stops the instance.
func (h *harness) stop() { h.bridge.Stop() }

// restart stops the instance and starts a new one on the same store. In
// Socket Mode it first waits for the fake to see the old connection closed:
// the new one is then the only one the fake pushes to.
func (h *harness) restart() {
	h.stop()
	if h.s.mode == slack.ModeSocket {
		h.waitFake("the old socket mode connection closed", func(s *slacktest.Server) bool { return s.Connections() == 0 })
	}
	h.start()
}

// ctx is a context with the tests' deadline.
func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) waitFake(what string, cond func(*slacktest.Server) bool) {
	h.t.Helper()
	if err := h.fake.WaitFor(h.ctx(), cond); err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitStore waits until cond holds, re-checking on every request change and
// outbox change (cond reads the store in transactions of its own).
func (h *harness) waitStore(what string, cond func() bool) {
	h.t.Helper()
	wake, cancel := h.db.Subscribe(requests.TopicRequests)
	defer cancel()
	wakeOut, cancelOut := h.db.Subscribe(store.TopicOutbox)
	defer cancelOut()
	ctx := h.ctx()
	tick := time.NewTicker(50 * time.Millisecond) // acks of effects do not notify
	defer tick.Stop()
	for {
		if cond() {
			return
		}
		select {
		case <-wake:
		case <-wakeOut:
		case <-tick.C:
		case <-ctx.Done():
			h.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// outboxEmpty reports whether every effect was delivered.
func (h *harness) outboxEmpty() bool {
	var n int
	err := h.db.View(h.ctx(), func(tx store.Tx) error {
		e, err := store.PendingEffects(tx, 1)
		n = len(e)
		return err
	})
	return err == nil && n == 0
}

// requestsList returns every request.
func (h *harness) requests() []*requests.Request {
	h.t.Helper()
	rs, err := h.svc.List(h.ctx(), requests.Filter{})
	if err != nil {
		h.t.Fatal(err)
	}
	return rs
}

// mention posts "<@bot> text" by user as a top-level message and delivers
// its app_mention event; it returns the event's body.
func (h *harness) mention(user, text string) []byte {
	h.t.Helper()
	body := h.mentionEvent(user, text)
	h.deliver(body)
	return body
}

// mentionEvent posts "<@bot> text" by user as a top-level message and
// returns its app_mention event.
func (h *harness) mentionEvent(user, text string) []byte {
	h.t.Helper()
	raw := "<@" + slacktest.BotUserID + "> " + text
	ts, err := h.fake.AddUserMessage(channel, user, raw, "")
	if err != nil {
		h.t.Fatal(err)
	}
	return slacktest.AppMentionEvent(h.eventID(), channel, user, raw, ts, "")
}

func (h *harness) eventID() string { return fmt.Sprintf("Ev%06d", h.events.Add(1)) }

// deliver sends an Events API payload the way the mode receives it and
// checks that it was acknowledged. As Slack does, it delivers the event
// again while it is not acknowledged (a 503; an envelope the connector left
// without its ack when its ack budget ran out, a core slower than it).
func (h *harness) deliver(body []byte) {
	h.t.Helper()
	if h.s.mode == slack.ModeEvents {
		if resp := h.post("/slack/events", body, "application/json", time.Now(), 0); resp.StatusCode != http.StatusOK {
			h.t.Fatalf("POST /slack/events: %d", resp.StatusCode)
		}
		return
	}
	id, err := h.fake.PushEventsAPI(h.ctx(), body)
	if err != nil {
		h.t.Fatal(err)
	}
	ev := eventIDOf(h.t, body)
	for {
		seen := h.late(ev)
		h.until("the ack of envelope "+id, func() bool { return h.fake.Acked(id) || h.late(ev) > seen })
		if h.fake.Acked(id) {
			return
		}
		if id, err = h.fake.Redeliver(h.ctx(), id); err != nil { // Slack's retry
			h.t.Fatal(err)
		}
	}
}

// deliverUnacked sends an Events API payload the way the mode receives it
// (again while the connector does not run yet) and waits until the
// connector has left it unacknowledged at the end of its ack budget (the
// core holds it, or the events before it in its lane): a 503, an envelope
// without its ack. Slack would deliver it again; this does not.
func (h *harness) deliverUnacked(body []byte) {
	h.t.Helper()
	ev := eventIDOf(h.t, body)
	seen := h.late(ev)
	if h.s.mode == slack.ModeSocket {
		if _, err := h.fake.PushEventsAPI(h.ctx(), body); err != nil {
			h.t.Fatal(err)
		}
		h.until("event "+ev+" left unacknowledged", func() bool { return h.late(ev) > seen })
		return
	}
	tick := time.NewTicker(10 * time.Millisecond) // Slack's pace, were the connector not running yet
	defer tick.Stop()
	for h.late(ev) == seen { // the budget's 503 comes after the log line
		if code, _ := h.postOnce("/slack/events", body, "application/json", 0); code != http.StatusServiceUnavailable {
			h.t.Fatalf("POST /slack/events of a held event: %d, want 503", code)
		}
		if h.late(ev) == seen {
			<-tick.C
		}
	}
}

// lateMsg begins the log line of an event whose ack budget ran out.
const lateMsg = "ack budget ran out"

// late is how many times the connector logged that event's ack budget ran
// out.
func (h *harness) late(event string) int { return h.lateEvents()[event] }

// lateEvents is how many times the connector logged each event's ack
// budget ran out, by event_id.
func (h *harness) lateEvents() map[string]int {
	late := map[string]int{}
	for line := range strings.Lines(h.logs.String()) {
		if !strings.Contains(line, lateMsg) {
			continue
		}
		if _, rest, ok := strings.Cut(line, " event_id="); ok {
			id, _, _ := strings.Cut(rest, " ")
			late[id]++
		}
	}
	return late
}

// eventIDOf is the event_id of an Events API payload.
func eventIDOf(t testing.TB, body []byte) string {
	t.Helper()
	var v struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.EventID == "" {
		t.Fatalf("no event_id in %s: %v", body, err)
	}
	return v.EventID
}

// until waits until cond holds, re-checking it on every change of the
// fake and every log line.
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	ctx := h.ctx()
	for {
		fake, logs := h.fake.Changed(), h.logs.changed()
		if cond() {
			return
		}
		select {
		case <-fake:
		case <-logs:
		case <-ctx.Done():
			h.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// click delivers a block_actions payload the way the mode receives it.
func (h *harness) click(payload []byte) {
	h.t.Helper()
	if h.s.mode == slack.ModeEvents {
		form := slacktest.InteractivityForm(payload).Encode()
		if resp := h.post("/slack/interactivity", []byte(form), "application/x-www-form-urlencoded", time.Now(), 0); resp.StatusCode != http.StatusOK {
			h.t.Fatalf("POST /slack/interactivity: %d", resp.StatusCode)
		}
		return
	}
	id, err := h.fake.PushInteractive(h.ctx(), payload)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.fake.WaitAck(h.ctx(), id); err != nil {
		h.t.Fatal(err)
	}
}

// post sends a webhook signed at ts (retry > 0 adds X-Slack-Retry-Num). It
// sends it again while the answer is 503 (the connector's Run has not
// started yet, or the core has not stored the event within the ack budget),
// as Slack does.
func (h *harness) post(path string, body []byte, contentType string, ts time.Time, retry int) *http.Response {
	h.t.Helper()
	return postAccepted(h.t, h.ctx(), h.bridge.URL+path, body, contentType, func(req *http.Request) {
		signRetry(req, body, ts, retry)
	})
}

// postOnce sends a webhook signed now, once (retry > 0 adds
// X-Slack-Retry-Num), and returns the answer's status and how long it took.
func (h *harness) postOnce(path string, body []byte, contentType string, retry int) (int, time.Duration) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.ctx(), http.MethodPost, h.bridge.URL+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	signRetry(req, body, time.Now(), retry)
	start := time.Now()
	resp := h.do(req)
	return resp.StatusCode, time.Since(start)
}

// signRetry signs req as Slack does at ts; retry > 0 marks it as Slack's
// retry number retry.
func signRetry(req *http.Request, body []byte, ts time.Time, retry int) {
	slacktest.SignRequest(req, body, secret, ts)
	if retry > 0 {
		req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(retry))
		req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	}
}

// postAccepted POSTs body to url, again while the answer is 503, until ctx ends.
func postAccepted(t testing.TB, ctx context.Context, url string, body []byte, contentType string, sign func(*http.Request)) *http.Response {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return resp
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("POST %s: still 503 at the deadline", url)
		}
	}
}

func (h *harness) do(req *http.Request) *http.Response {
	h.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// parents returns the bot's top-level messages that title request id.
func (h *harness) parents(id string) []slacktest.Message {
	var out []slacktest.Message
	for _, m := range h.fake.Messages() {
		if m.Channel == channel && m.ThreadTS == "" && m.User == slacktest.BotUserID && strings.HasPrefix(m.Text, id+" ") {
			out = append(out, m)
		}
	}
	return out
}

// replies returns the texts of the replies in the thread of parent ts.
func (h *harness) replies(ts string) []string {
	var out []string
	for _, m := range h.fake.Thread(channel, ts) {
		if m.TS != ts {
			out = append(out, m.Text)
		}
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer = syncbuf.Buffer

// logBuffer is the harness's log: a syncBuffer whose writes a test can wait
// on (harness.until).
type logBuffer struct {
	syncBuffer
	mu   sync.Mutex
	wake chan struct{} // closed and replaced on every write
}

// Write appends p and wakes the waiters.
func (b *logBuffer) Write(p []byte) (int, error) {
	n, err := b.syncBuffer.Write(p)
	b.mu.Lock()
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
	return n, err
}

// changed returns a channel closed at the next write.
func (b *logBuffer) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return b.wake
}

// blockTexts is every text of a message's blocks, one per line.
func blockTexts(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("blocks %s: %v", raw, err)
	}
	var texts []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x["text"].(string); ok {
				texts = append(texts, s)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return strings.Join(texts, "\n")
}

type slackBlock = slackgo.Block
