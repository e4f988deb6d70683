package feishu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/testbin"
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
	chatID     = "oc_room"
	owner      = "ou_owner"
	member     = "ou_alice"
	approver   = "ou_approver"
	slackOwner = "UOWNER"
	slackChan  = "C0123"
	appSecret  = "feishutest-app-secret"
	vtoken     = "feishutest-verification-token"
	encryptKey = "feishutest-encrypt-key"
	waitFor    = 60 * time.Second
)

var modes = []string{feishu.ModeWS, feishu.ModeCallback}

// appSeq makes app IDs unique: the SDK caches tenant tokens process-wide by app.
var appSeq atomic.Int64

// setup describes a harness.
type setup struct {
	mode  string
	fake  []feishutest.Option
	conn  func(*feishu.Options)
	slack bool // also run the Slack connector against slacktest, on the same room
	// handler, if set, wraps the core's chat.Handler as the Feishu
	// connector sees it (a slow or stuck core), in both modes.
	handler func(chat.Handler) chat.Handler
}

// harness is the whole bridge (core.New on a bolt file, running the demo
// agent) in this process, with the Feishu connector talking to feishutest
// (and, for cross-surface tests, the Slack connector to slacktest).
type harness struct {
	t     *testing.T
	s     setup
	appID string
	fake  *feishutest.Server
	slack *slacktest.Server
	dir   string
	log   *slog.Logger
	logs  *syncBuffer

	bridge *coretest.Bridge
	db     *bolt.DB
	svc    *requests.Service
	del    *delegation.Service
	conn   *feishu.Connector
	events atomic.Int64
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	h := &harness{t: t, s: s, dir: t.TempDir(), logs: &syncBuffer{},
		appID: fmt.Sprintf("cli_test%d_%d", os.Getpid(), appSeq.Add(1))}
	h.log = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.fake = feishutest.New(h.appID, appSecret, s.fake...)
	if s.slack {
		h.slack = slacktest.NewServer()
	}
	t.Cleanup(func() {
		if h.bridge != nil {
			h.bridge.Stop()
		}
		h.fake.Close()
		if h.slack != nil {
			h.slack.Close()
		}
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs.String())
		}
	})
	h.start()
	return h
}

// config is the bridge's config: one room on the test chat (and, with
// slack, on the Slack channel too).
func (h *harness) config() string {
	room := "{name: backend, feishu_chat: " + chatID + ", agents: [coder], approvers: [feishu:" + approver
	slackSection := ""
	if h.slack != nil {
		room = "{name: backend, feishu_chat: " + chatID + ", slack_channel: " + slackChan +
			", agents: [coder], approvers: [feishu:" + approver + ", slack:" + slackOwner
		slackSection = "slack: {mode: socket, bot_token: xoxb-test, app_token: xapp-test}\n"
	}
	return fmt.Sprintf(`owner: acme
owners: [feishu:%s]
data_dir: %%DIR%%
feishu: {mode: %s, app_id: %s, app_secret: test, verification_token: test}
%srooms:
  - %s]}
agents:
  coder: {kind: exec, command: [%q, demo-agent], workdir: %q}
`, owner, h.s.mode, h.appID, slackSection, room, bridgeBin, h.dir)
}

func (h *harness) start() {
	t := h.t
	t.Helper()
	opts := feishu.Options{Mode: h.s.mode, AppID: h.appID, AppSecret: appSecret, VerificationToken: vtoken,
		EncryptKey: encryptKey, BaseURL: h.fake.URL(), Log: h.log}
	if h.s.conn != nil {
		h.s.conn(&opts)
	}
	conn, err := feishu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	conns := []chat.Connector{conn}
	if h.s.handler != nil {
		conns[0] = wrappedCore{conn, h.s.handler}
	}
	if h.slack != nil {
		sc, err := slack.New(slack.Options{Mode: slack.ModeSocket, BotToken: slacktest.DefaultBotToken,
			AppToken: slacktest.DefaultAppToken, APIURL: h.slack.APIURL(), Log: h.log, PingInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, sc)
	}
	h.bridge = coretest.Start(t, coretest.Options{Config: h.config(), Dir: h.dir, Log: h.log,
		Connectors: func() []chat.Connector { return conns }})
	h.db, h.svc, h.del, h.conn = h.bridge.DB, h.bridge.Requests(), h.bridge.Delegation(), conn
	if h.s.mode == feishu.ModeCallback {
		h.waitUntil("the connector receiving callbacks", conn.Receiving)
	}
	if h.s.mode == feishu.ModeWS {
		h.waitFake("a long connection", func() bool { return h.fake.Connections() > 0 })
	}
	if h.slack != nil {
		if err := h.slack.WaitFor(h.ctx(), func(s *slacktest.Server) bool { return s.Connections() > 0 }); err != nil {
			t.Fatalf("waiting for slack socket mode: %v", err)
		}
	}
}

// wrappedCore is the Feishu connector seeing the core through wrap.
type wrappedCore struct {
	*feishu.Connector
	wrap func(chat.Handler) chat.Handler
}

func (w wrappedCore) Run(ctx context.Context, h chat.Handler) error {
	return w.Connector.Run(ctx, w.wrap(h))
}

func (w wrappedCore) Routes(h chat.Handler) map[string]http.Handler {
	return w.Connector.Routes(w.wrap(h))
}

// waitUntil waits, re-checking every few milliseconds until the tests'
// deadline, for a condition that no fake's change announces.
func (h *harness) waitUntil(what string, cond func() bool) {
	h.t.Helper()
	ctx := h.ctx()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			h.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// ctx is a context with the tests' deadline.
func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) waitFake(what string, cond func() bool) {
	h.t.Helper()
	if err := h.fake.WaitFor(h.ctx(), cond); err != nil {
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitStore waits until cond holds, re-checking on every request and outbox
// change (and on a short tick: acks do not notify). cond runs outside any
// transaction: it opens its own (bolt deadlocks on a read transaction opened
// inside another while a writer grows the file).
func (h *harness) waitStore(what string, cond func() bool) {
	h.t.Helper()
	wake, cancel := h.db.Subscribe(requests.TopicRequests)
	defer cancel()
	wakeOut, cancelOut := h.db.Subscribe(store.TopicOutbox)
	defer cancelOut()
	ctx := h.ctx()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-wake:
		case <-wakeOut:
		case <-tick.C:
		case <-ctx.Done():
			h.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// settled is a waitStore condition: n requests, all ended, and nothing left
// in the outbox.
func (h *harness) settled(n int) func() bool {
	return func() bool {
		rs, err := h.svc.List(context.Background(), requests.Filter{})
		if err != nil || len(rs) != n {
			return false
		}
		for _, r := range rs {
			if !r.State.Terminal() {
				return false
			}
		}
		var empty bool
		err = h.db.View(context.Background(), func(tx store.Tx) error {
			e, err := store.PendingEffects(tx, 1)
			empty = len(e) == 0
			return err
		})
		return err == nil && empty
	}
}

func (h *harness) requests() []*requests.Request {
	h.t.Helper()
	rs, err := h.svc.List(h.ctx(), requests.Filter{})
	if err != nil {
		h.t.Fatal(err)
	}
	return rs
}

// askEvent is an im.message.receive_v1 event of user mentioning the bot with text.
func (h *harness) askEvent(user, text string) []byte { return h.askEventID(h.eventID(), user, text) }

// askEventID is askEvent with the event ID id.
func (h *harness) askEventID(id, user, text string) []byte {
	return feishutest.MessageEvent{
		EventID: id, Token: vtoken, AppID: h.appID, SenderOpenID: user, ChatID: chatID,
		Text:     "@_user_1 " + text,
		Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: h.fake.BotOpenID(), Name: "roombridge"}},
	}.JSON()
}

func (h *harness) eventID() string { return fmt.Sprintf("ev_%s_%06d", h.appID, h.events.Add(1)) }

// deliver sends an event the way the mode receives it and checks that it was
// acknowledged with success.
func (h *harness) deliver(body []byte) {
	h.t.Helper()
	if h.s.mode == feishu.ModeCallback {
		if code, resp := h.post(body, time.Now()); code != http.StatusOK {
			h.t.Fatalf("POST %s: %d %s", feishu.EventsPath, code, resp)
		}
		return
	}
	id, err := h.fake.PushEvent(h.ctx(), body)
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitAck(id)
}

// send delivers an event the way the mode receives it, whatever its
// answer: the status (200, or 500 for an event answered with an error),
// the long-connection frame's message_id (Redeliver pushes it again; "" in
// callback mode) and how long the answer took.
func (h *harness) send(body []byte) (status int, frame string, took time.Duration) {
	h.t.Helper()
	start := time.Now()
	if h.s.mode == feishu.ModeCallback {
		code, _ := h.post(body, time.Now())
		return code, "", time.Since(start)
	}
	id, err := h.fake.PushEvent(h.ctx(), body)
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitFake("the answer to "+id, func() bool { return len(h.fake.Responses(id)) > 0 })
	return h.fake.Responses(id)[0].StatusCode, id, time.Since(start)
}

// replyEvent is an im.message.receive_v1 event of user writing text in the
// topic rooted at root (a message the fake holds, so it can be replied to).
func (h *harness) replyEvent(user string, root feishutest.Message, text string) []byte {
	msg := h.fake.AddUserMessage(root.ChatID, user, text, root.ID)
	return feishutest.MessageEvent{EventID: h.eventID(), Token: vtoken, AppID: h.appID, SenderOpenID: user,
		ChatID: root.ChatID, MessageID: msg, RootID: root.ID, ParentID: root.ID, ThreadID: root.ThreadID, Text: text}.JSON()
}

// waitAck waits for the client's answer to frame id and checks it is a 200.
func (h *harness) waitAck(id string) {
	h.t.Helper()
	h.waitFake("the ack of "+id, func() bool { return len(h.fake.Responses(id)) > 0 })
	if r := h.fake.Responses(id)[0]; r.StatusCode != http.StatusOK {
		h.t.Fatalf("frame %s answered %d: %s", id, r.StatusCode, r.Data)
	}
}

// click delivers a card action the way the mode receives it and returns the
// answer (toast and card).
func (h *harness) click(body []byte) cardAnswer {
	h.t.Helper()
	var raw []byte
	if h.s.mode == feishu.ModeCallback {
		code, resp := h.post(body, time.Now())
		if code != http.StatusOK {
			h.t.Fatalf("card action: %d %s", code, resp)
		}
		raw = resp
	} else {
		var err error
		if raw, err = h.fake.PushCardAction(h.ctx(), body); err != nil {
			h.t.Fatal(err)
		}
	}
	var a cardAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		h.t.Fatalf("card action answer %s: %v", raw, err)
	}
	return a
}

type cardAnswer struct {
	Toast *struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	} `json:"toast"`
	Card json.RawMessage `json:"card"`
}

// post sends body encrypted and signed at ts to the callback URL, as Feishu does.
func (h *harness) post(body []byte, ts time.Time) (int, []byte) {
	h.t.Helper()
	enc, err := feishutest.Encrypt(encryptKey, body)
	if err != nil {
		h.t.Fatal(err)
	}
	req, err := feishutest.SignedRequest(h.ctx(), h.bridge.URL+feishu.EventsPath, encryptKey, []byte(enc), ts)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.do(req)
}

func (h *harness) do(req *http.Request) (int, []byte) {
	h.t.Helper()
	req.Close = true // a connection per request: no reuse of one the server just closed
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// parents returns the bot's top-level messages in the room's chat whose card
// title starts with request id.
func (h *harness) parents(id string) []feishutest.Message {
	var out []feishutest.Message
	for _, m := range h.fake.Messages() {
		if m.ChatID == chatID && m.RootID == "" && m.MsgType == "interactive" && strings.HasPrefix(cardTitle(m.Content), id+" ") {
			out = append(out, m)
		}
	}
	return out
}

// approvalCards returns the messages that carry approval id's card.
func (h *harness) approvalCards(id string) []feishutest.Message {
	var out []feishutest.Message
	for _, m := range h.fake.Messages() {
		if m.MsgType == "interactive" && strings.Contains(cardTitle(m.Content), "· "+id+" ·") {
			out = append(out, m)
		}
	}
	return out
}

// card is the part of a card JSON 2.0 the tests read.
type card struct {
	Schema string `json:"schema"`
	Config struct {
		UpdateMulti bool `json:"update_multi"`
	} `json:"config"`
	Header struct {
		Title struct {
			Content string `json:"content"`
		} `json:"title"`
	} `json:"header"`
}

func cardTitle(content json.RawMessage) string {
	var c card
	_ = json.Unmarshal(content, &c)
	return c.Header.Title.Content
}

// texts are the plain texts shown on a card or in a text message.
func texts(content json.RawMessage) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if c, ok := x["content"].(string); ok {
				b.WriteString(c + "\n")
			}
			if c, ok := x["text"].(string); ok {
				b.WriteString(c + "\n")
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
	var v any
	_ = json.Unmarshal(content, &v)
	walk(v)
	return b.String()
}

// button returns the callback value of the card's button actionID, as a
// person's click sends it back.
func button(t *testing.T, content json.RawMessage, actionID string) map[string]any {
	t.Helper()
	var found map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["tag"] == "button" {
				for _, b := range x["behaviors"].([]any) {
					val := b.(map[string]any)["value"].(map[string]any)
					if val["action_id"] == actionID {
						found = val
					}
				}
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
	var v any
	if err := json.Unmarshal(content, &v); err != nil {
		t.Fatal(err)
	}
	walk(v)
	if found == nil {
		t.Fatalf("no %s button on card %s", actionID, content)
	}
	return found
}

func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer = syncbuf.Buffer
