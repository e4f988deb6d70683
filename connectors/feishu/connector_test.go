package feishu_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

// recorder is a chat.Handler that records events and answers with a
// configurable response, optionally after a delay.
type recorder struct {
	mu     sync.Mutex
	events []chat.Event
	answer chat.Response
	delay  time.Duration
	seen   chan struct{}
}

func newRecorder() *recorder { return &recorder{seen: make(chan struct{}, 100)} }

func (r *recorder) Handle(_ context.Context, ev chat.Event) chat.Response {
	r.mu.Lock()
	r.events = append(r.events, ev)
	answer, delay := r.answer, r.delay
	r.mu.Unlock()
	r.seen <- struct{}{}
	time.Sleep(delay) // plays a slow core; nothing waits on it with a sleep
	return answer
}

func (r *recorder) all() []chat.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]chat.Event(nil), r.events...)
}

// bare runs the connector alone (no core) over the long connection, with
// events going to rec.
type bare struct {
	t    *testing.T
	fake *feishutest.Server
	conn *feishu.Connector
	rec  *recorder
	app  string
}

func newBare(t *testing.T, tweak func(*feishu.Options)) *bare {
	t.Helper()
	b := &bare{t: t, rec: newRecorder(), app: fmt.Sprintf("cli_bare_%d", appSeq.Add(1))}
	b.fake = feishutest.New(b.app, appSecret)
	logs := &syncBuffer{}
	o := feishu.Options{AppID: b.app, AppSecret: appSecret, BaseURL: b.fake.URL(),
		Log: newTestLogger(logs)}
	if tweak != nil {
		tweak(&o)
	}
	conn, err := feishu.New(o)
	if err != nil {
		t.Fatal(err)
	}
	b.conn = conn
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := conn.Run(ctx, b.rec); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		b.fake.Close()
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	b.wait("a long connection", func() bool { return b.fake.Connections() > 0 })
	return b
}

func (b *bare) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	b.t.Cleanup(cancel)
	return ctx
}

func (b *bare) wait(what string, cond func() bool) {
	b.t.Helper()
	if err := b.fake.WaitFor(b.ctx(), cond); err != nil {
		b.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// push delivers ev and waits for its ack; it returns how long the ack took.
func (b *bare) push(ev feishutest.MessageEvent) time.Duration {
	b.t.Helper()
	start := time.Now()
	id, err := b.fake.PushEvent(b.ctx(), ev.JSON())
	if err != nil {
		b.t.Fatal(err)
	}
	b.wait("the ack", func() bool { return len(b.fake.Responses(id)) > 0 })
	if r := b.fake.Responses(id)[0]; r.StatusCode != http.StatusOK {
		b.t.Fatalf("frame %s answered %d", id, r.StatusCode)
	}
	return time.Since(start)
}

// A 429 with x-ogw-ratelimit-reset becomes a RetryAfterError of exactly that
// long, so the outbox retries then and not sooner.
func TestRateLimitAnswerIsRetryAfter(t *testing.T) {
	t.Parallel()
	b := newBare(t, nil)
	b.fake.FailNext(feishutest.RouteCreate, http.StatusTooManyRequests, feishutest.CodeRateLimited, 3*time.Second)
	_, _, err := b.conn.StartThread(b.ctx(), chatID, chat.Message{Request: "R20261129-01", Kind: "parent", Text: "hi"})
	var ra *chat.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 3*time.Second {
		t.Fatalf("StartThread after a 429: %v, want a RetryAfterError of 3s", err)
	}
	b.fake.FailNext(feishutest.RoutePatch, http.StatusTooManyRequests, feishutest.CodeRateLimited, 0)
	err = b.conn.Update(b.ctx(), chat.MessageRef{Surface: chat.Feishu, ID: "om_any"}, chat.Message{Text: "x"})
	if !errors.As(err, &ra) || ra.After != time.Second {
		t.Fatalf("Update after a 429 without reset: %v, want a RetryAfterError of 1s", err)
	}
}

// A burst of sends into one chat, started at the connector's pace (5 a
// second less 10 %, from their starts, with a floor after each answer),
// never has Feishu's 5 per second per chat (the fake's sliding window)
// answer 429, whatever each send's latency.
func TestBurstIntoOneChatIsNeverLimited(t *testing.T) {
	t.Parallel()
	b := newBare(t, nil)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, _, err := b.conn.StartThread(b.ctx(), chatID, chat.Message{Text: fmt.Sprintf("post %d", i)}); err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if got, limited := len(b.fake.Messages()), b.fake.RateLimited(); got != n || limited != 0 {
		t.Errorf("%d messages, %d answered 429; want %d, 0", got, limited, n)
	}
}

// What Feishu refuses outright (an unknown message, oversize content) is a
// permanent error: the outbox drops it with an audit record instead of
// blocking the thread; a 5xx is retried.
func TestRefusedSendIsPermanent(t *testing.T) {
	t.Parallel()
	b := newBare(t, nil)
	_, err := b.conn.Reply(b.ctx(), chat.ThreadRef{Surface: chat.Feishu, Channel: chatID, ID: "om_unknown"},
		chat.Message{Text: "hello"})
	if !errors.Is(err, chat.ErrPermanent) {
		t.Errorf("reply to an unknown message: %v, want ErrPermanent", err)
	}
	b.fake.FailNext(feishutest.RouteCreate, http.StatusBadGateway, 500, 0)
	_, _, err = b.conn.StartThread(b.ctx(), chatID, chat.Message{Text: "hi"})
	if err == nil || errors.Is(err, chat.ErrPermanent) {
		t.Errorf("send after a 502: %v, want a transient error", err)
	}
}

// Every send carries a uuid from the idempotency key (hashed when over 50
// characters), so a retried send makes no second message.
func TestSendsCarryUUID(t *testing.T) {
	t.Parallel()
	b := newBare(t, nil)
	long := "feishu/approval/R20261129-07.12/dm/feishu:ou_0123456789abcdef0123456789"
	for _, key := range []string{"feishu/R20261129-07/parent", long} {
		m := chat.Message{Request: "R20261129-07", Kind: "parent", Card: &chat.Card{Title: "R20261129-07"}, IdempotencyKey: key}
		_, first, err := b.conn.StartThread(b.ctx(), chatID, m)
		if err != nil {
			t.Fatal(err)
		}
		_, again, err := b.conn.StartThread(b.ctx(), chatID, m)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := b.fake.Message(first.ID)
		if first.ID != again.ID || got.UUID == "" || len(got.UUID) > 50 {
			t.Errorf("key %q: sends %s and %s with uuid %q: want one message, uuid of at most 50", key, first.ID, again.ID, got.UUID)
		}
	}
	if n := len(b.fake.Messages()); n != 2 {
		t.Errorf("%d messages, want 2", n)
	}
	ref, err := b.conn.Direct(b.ctx(), approver, chat.Message{Text: "please decide", IdempotencyKey: "dm-1"})
	if m, _ := b.fake.Message(ref.ID); err != nil || m.ReceiveIDType != "open_id" || m.ReceiveID != approver || m.UUID != "dm-1" {
		t.Errorf("direct message %+v (%v): want one to the open_id with its uuid", m, err)
	}
}

// A mention becomes an ask without the mention; a message in a topic a reply
// to the topic's root; a group message that addresses no one is not for the
// bridge; a post (rich text) is read as text.
func TestInboundMessages(t *testing.T) {
	t.Parallel()
	b := newBare(t, nil)
	bot := feishutest.Mention{Key: "@_user_1", OpenID: b.fake.BotOpenID(), Name: "roombridge"}
	other := feishutest.Mention{Key: "@_user_2", OpenID: "ou_bob", Name: "Bob"}
	b.push(feishutest.MessageEvent{EventID: "ev_1", SenderOpenID: member, ChatID: chatID,
		Text: "@_user_1 coder: review with @_user_2", Mentions: []feishutest.Mention{bot, other}})
	b.push(feishutest.MessageEvent{EventID: "ev_2", SenderOpenID: member, ChatID: chatID, Text: "just chatting"})
	b.push(feishutest.MessageEvent{EventID: "ev_3", SenderOpenID: member, ChatID: chatID,
		Text: "@_user_2 lunch?", Mentions: []feishutest.Mention{other}})
	b.push(feishutest.MessageEvent{EventID: "ev_4", SenderOpenID: member, ChatID: chatID, RootID: "om_root",
		ParentID: "om_root", ThreadID: "omt_1", Text: "more detail please"})
	b.push(feishutest.MessageEvent{EventID: "ev_5", SenderOpenID: member, ChatID: chatID, MessageType: "post",
		Content:  `{"title":"","content":[[{"tag":"at","user_id":"@_user_1","user_name":"roombridge"},{"tag":"text","text":" deploy it"}]]}`,
		Mentions: []feishutest.Mention{bot}})
	evs := b.rec.all()
	want := []chat.Event{
		{Kind: chat.Ask, Surface: chat.Feishu, ID: "ev_1", Channel: chatID, User: "feishu:" + member, Text: "coder: review with @Bob"},
		{Kind: chat.Reply, Surface: chat.Feishu, ID: "ev_4", Channel: chatID, User: "feishu:" + member, Text: "more detail please",
			Thread: &chat.ThreadRef{Surface: chat.Feishu, Channel: chatID, ID: "om_root"}},
		{Kind: chat.Ask, Surface: chat.Feishu, ID: "ev_5", Channel: chatID, User: "feishu:" + member, Text: "deploy it"},
	}
	if len(evs) != len(want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	for i := range want {
		got, w := evs[i], want[i]
		if got.Kind != w.Kind || got.ID != w.ID || got.Channel != w.Channel || got.User != w.User || got.Text != w.Text ||
			(w.Thread == nil) != (got.Thread == nil) || (w.Thread != nil && *w.Thread != *got.Thread) {
			t.Errorf("event %d: %+v, want %+v", i, got, w)
		}
	}
}

// A message is answered within the ack budget even when the core is slow:
// with an error, as it is not stored yet (Feishu pushes it again); a
// refusal that comes later is still told, as a reply to the message.
func TestAnswerBeforeSlowWork(t *testing.T) {
	t.Parallel()
	b := newBare(t, func(o *feishu.Options) { o.AckBudget = 200 * time.Millisecond })
	b.rec.answer, b.rec.delay = chat.Response{Text: "feishu oc_room is not bound to a room", Error: true}, time.Second
	msg := b.fake.AddUserMessage(chatID, member, "@roombridge hi", "")
	start := time.Now()
	id, err := b.fake.PushEvent(b.ctx(), feishutest.MessageEvent{EventID: "ev_slow", MessageID: msg, SenderOpenID: member, ChatID: chatID,
		Text: "@_user_1 hi", Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: b.fake.BotOpenID()}}}.JSON())
	if err != nil {
		t.Fatal(err)
	}
	b.wait("the answer", func() bool { return len(b.fake.Responses(id)) > 0 })
	if took, r := time.Since(start), b.fake.Responses(id)[0]; took > 900*time.Millisecond || r.StatusCode == http.StatusOK {
		t.Errorf("answered %d after %s with a 200ms budget and a 1s core, want an error within the budget", r.StatusCode, took)
	}
	b.wait("the refusal notice", func() bool {
		for _, m := range b.fake.Messages() {
			if m.ParentID == msg && strings.Contains(string(m.Content), "not bound") && !m.ReplyInThread {
				return true
			}
		}
		return false
	})
}

// Where the connector does not run (before Run, or on an HA follower that
// serves the webhooks but not the leader's work) events get 503, so Feishu
// delivers them again; the URL challenge is still answered.
func TestCallbackWhileNotRunning(t *testing.T) {
	t.Parallel()
	app := fmt.Sprintf("cli_idle_%d", appSeq.Add(1))
	fake := feishutest.New(app, appSecret)
	defer fake.Close()
	conn, err := feishu.New(feishu.Options{Mode: feishu.ModeCallback, AppID: app, AppSecret: appSecret,
		VerificationToken: vtoken, EncryptKey: encryptKey, BaseURL: fake.URL(), Log: newTestLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	h := conn.Routes(rec)["POST "+feishu.EventsPath]
	post := func(body []byte) int {
		enc, err := feishutest.Encrypt(encryptKey, body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := feishutest.SignedRequest(context.Background(), "http://bridge"+feishu.EventsPath, encryptKey, []byte(enc), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	ev := feishutest.MessageEvent{Token: vtoken, SenderOpenID: member, ChatID: chatID, Text: "@_user_1 hi",
		Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: fake.BotOpenID()}}}.JSON()
	if code := post(ev); code != http.StatusServiceUnavailable {
		t.Errorf("event while not running: %d, want 503", code)
	}
	challenge := []byte(`{"challenge":"c-1","token":"` + vtoken + `","type":"url_verification"}`)
	if code := post(challenge); code != http.StatusOK {
		t.Errorf("challenge while not running: %d, want 200", code)
	}
	if n := len(rec.all()); n != 0 {
		t.Errorf("%d events reached the handler", n)
	}
}
