package feishutest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lark "github.com/larksuite/oapi-sdk-go/v3"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	"github.com/larksuite/oapi-sdk-go/v3/core/httpserverext"
	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

const (
	secret = "s3cret"
	card2  = `{"schema":"2.0","config":{"update_multi":true},"body":{"elements":[{"tag":"markdown","content":"REQ-1 pending"}]}}`
	text   = `{"text":"hello"}`
)

// TestMain fails the run if any goroutine of the fake outlives its Close.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if strings.Contains(stacks, "/connectors/feishu/feishutest.") {
			fmt.Fprintf(os.Stderr, "goroutines of the fake leaked after Close:\n%s\n", stacks)
			code = 1
		}
	}
	os.Exit(code)
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var apps atomic.Int64

// newFake starts a fake for an app unique to the test run: the SDK's token
// cache is process-wide and keyed by app, and survives -count=N.
func newFake(t *testing.T, opts ...feishutest.Option) (*feishutest.Server, string) {
	t.Helper()
	appID := fmt.Sprintf("cli_%s_%d", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), apps.Add(1))
	srv := feishutest.New(appID, secret, opts...)
	t.Cleanup(srv.Close)
	return srv, appID
}

func newClient(srv *feishutest.Server, appID string, opts ...lark.ClientOptionFunc) *lark.Client {
	opts = append([]lark.ClientOptionFunc{lark.WithOpenBaseUrl(srv.URL()), lark.WithLogLevel(larkcore.LogLevelError)}, opts...)
	return lark.NewClient(appID, secret, opts...)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func create(ctx context.Context, t *testing.T, cli *lark.Client, idType, to, msgType, content, uuid string) *larkim.CreateMessageResp {
	t.Helper()
	resp, err := cli.Im.V1.Message.Create(ctx, larkim.NewCreateMessageReqBuilder().ReceiveIdType(idType).Body(
		larkim.NewCreateMessageReqBodyBuilder().ReceiveId(to).MsgType(msgType).Content(content).Uuid(uuid).Build()).Build())
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return resp
}

func reply(ctx context.Context, t *testing.T, cli *lark.Client, parent string, inThread bool, uuid string) *larkim.ReplyMessageResp {
	t.Helper()
	resp, err := cli.Im.V1.Message.Reply(ctx, larkim.NewReplyMessageReqBuilder().MessageId(parent).Body(
		larkim.NewReplyMessageReqBodyBuilder().MsgType("text").Content(text).ReplyInThread(inThread).Uuid(uuid).Build()).Build())
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	return resp
}

func patch(ctx context.Context, t *testing.T, cli *lark.Client, id, content string) *larkim.PatchMessageResp {
	t.Helper()
	resp, err := cli.Im.V1.Message.Patch(ctx, larkim.NewPatchMessageReqBuilder().MessageId(id).Body(
		larkim.NewPatchMessageReqBodyBuilder().Content(content).Build()).Build())
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	return resp
}

type coded interface {
	Success() bool
}

func mustOK(t *testing.T, what string, r coded, code int, msg string) {
	t.Helper()
	if !r.Success() {
		t.Fatalf("%s: code %d %q, want success", what, code, msg)
	}
}

func TestTenantTokenFetchedOnceAndEnforced(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	cli := newClient(srv, appID)
	for range 2 {
		r := create(ctx, t, cli, "chat_id", "oc_1", "text", text, "")
		mustOK(t, "create", r, r.Code, r.Msg)
	}
	if got := srv.TokenRequests(); got != 1 {
		t.Errorf("token requests = %d, want 1 (cached by the SDK)", got)
	}

	bogus := newClient(srv, appID, lark.WithEnableTokenCache(false))
	resp, err := bogus.Im.V1.Message.Create(ctx, larkim.NewCreateMessageReqBuilder().ReceiveIdType("chat_id").Body(
		larkim.NewCreateMessageReqBodyBuilder().ReceiveId("oc_1").MsgType("text").Content(text).Build()).Build(),
		larkcore.WithTenantAccessToken("t-bogus"))
	if err != nil || resp.Code != feishutest.CodeTokenInvalid {
		t.Errorf("bogus token: err %v, resp %+v; want code %d", err, resp, feishutest.CodeTokenInvalid)
	}
	resp, err = bogus.Im.V1.Message.Create(ctx, larkim.NewCreateMessageReqBuilder().ReceiveIdType("chat_id").Body(
		larkim.NewCreateMessageReqBodyBuilder().ReceiveId("oc_1").MsgType("text").Content(text).Build()).Build(),
		larkcore.WithTenantAccessToken(srv.TenantToken()))
	if err != nil || !resp.Success() {
		t.Errorf("explicit valid token: err %v, resp %+v", err, resp)
	}

	wrong := lark.NewClient(appID, "wrong", lark.WithOpenBaseUrl(srv.URL()), lark.WithLogLevel(larkcore.LogLevelError))
	if _, err := wrong.Im.V1.Message.Create(ctx, larkim.NewCreateMessageReqBuilder().ReceiveIdType("chat_id").Body(
		larkim.NewCreateMessageReqBodyBuilder().ReceiveId("oc_1").MsgType("text").Content(text).Build()).Build()); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprint(feishutest.CodeAppSecretInvalid)) {
		t.Errorf("wrong app secret: err %v, want code %d", err, feishutest.CodeAppSecretInvalid)
	}
	if got := len(srv.Messages()); got != 3 {
		t.Errorf("messages = %d, want 3", got)
	}
}

func TestReplyInThreadMakesOneTopicPerRoot(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	cli := newClient(srv, appID)

	root := create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "")
	mustOK(t, "create", root, root.Code, root.Msg)
	rootID := *root.Data.MessageId
	if *root.Data.ChatId != "oc_1" || *root.Data.MsgType != "interactive" || *root.Data.Body.Content != card2 || *root.Data.CreateTime == "" {
		t.Errorf("create data = %s", larkcore.Prettify(root.Data))
	}
	r1 := reply(ctx, t, cli, rootID, true, "")
	r2 := reply(ctx, t, cli, rootID, true, "")
	r3 := reply(ctx, t, cli, *r1.Data.MessageId, false, "") // parent in a topic: goes to the topic
	for i, r := range []*larkim.ReplyMessageResp{r1, r2, r3} {
		mustOK(t, "reply", r, r.Code, r.Msg)
		if r.Data.ThreadId == nil || *r.Data.ThreadId != *r1.Data.ThreadId || !strings.HasPrefix(*r.Data.ThreadId, "omt_") {
			t.Errorf("reply %d thread_id = %v, want %s", i, r.Data.ThreadId, *r1.Data.ThreadId)
		}
		if *r.Data.RootId != rootID || *r.Data.ChatId != "oc_1" {
			t.Errorf("reply %d root/chat = %s/%s", i, *r.Data.RootId, *r.Data.ChatId)
		}
	}
	if *r3.Data.ParentId != *r1.Data.MessageId || *r1.Data.ParentId != rootID {
		t.Errorf("parents = %s, %s", *r1.Data.ParentId, *r3.Data.ParentId)
	}
	thread := srv.Thread(rootID)
	if len(thread) != 4 {
		t.Fatalf("thread has %d messages, want root + 3", len(thread))
	}
	for _, m := range thread {
		if m.ThreadID != *r1.Data.ThreadId {
			t.Errorf("message %s thread %q, want %q", m.ID, m.ThreadID, *r1.Data.ThreadId)
		}
	}
	if !thread[1].ReplyInThread || thread[3].ReplyInThread {
		t.Errorf("ReplyInThread not recorded as sent: %+v", thread)
	}

	other := create(ctx, t, cli, "open_id", "ou_1", "text", text, "")
	o1 := reply(ctx, t, cli, *other.Data.MessageId, true, "")
	if *o1.Data.ThreadId == *r1.Data.ThreadId {
		t.Errorf("second root shares thread %s", *o1.Data.ThreadId)
	}
	if m, _ := srv.Message(*other.Data.MessageId); m.ReceiveIDType != "open_id" || m.ReceiveID != "ou_1" || m.ChatID != *other.Data.ChatId {
		t.Errorf("open_id message recorded as %+v", m)
	}
	plain := reply(ctx, t, cli, *create(ctx, t, cli, "chat_id", "oc_2", "text", text, "").Data.MessageId, false, "")
	if plain.Data.ThreadId != nil {
		t.Errorf("plain reply got thread %s", *plain.Data.ThreadId)
	}

	bad := reply(ctx, t, cli, "om_missing", true, "")
	if bad.Code != feishutest.CodeInvalidParam || bad.StatusCode != http.StatusBadRequest {
		t.Errorf("reply to unknown message: %d %d", bad.StatusCode, bad.Code)
	}
}

func TestUUIDDedupe(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, appID := newFake(t, feishutest.WithClock(clk))
	ctx := testCtx(t)
	cli := newClient(srv, appID)

	a := create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "req-1-parent")
	b := create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "req-1-parent")
	if *a.Data.MessageId != *b.Data.MessageId || len(srv.Messages()) != 1 {
		t.Fatalf("same uuid gave %s and %s, %d messages", *a.Data.MessageId, *b.Data.MessageId, len(srv.Messages()))
	}
	r1 := reply(ctx, t, cli, *a.Data.MessageId, true, "req-1-reply-1")
	r2 := reply(ctx, t, cli, *a.Data.MessageId, true, "req-1-reply-1")
	if *r1.Data.MessageId != *r2.Data.MessageId || *r2.Data.ThreadId != *r1.Data.ThreadId || len(srv.Messages()) != 2 {
		t.Fatalf("reply uuid dedupe: %s vs %s, %d messages", *r1.Data.MessageId, *r2.Data.MessageId, len(srv.Messages()))
	}
	clk.Advance(time.Hour)
	c := create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "req-1-parent")
	if *c.Data.MessageId == *a.Data.MessageId || len(srv.Messages()) != 3 {
		t.Errorf("uuid still deduped after an hour")
	}
	if m, _ := srv.Message(*c.Data.MessageId); m.UUID != "req-1-parent" {
		t.Errorf("uuid not recorded: %+v", m)
	}
}

func TestPatchUpdatesCard(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, appID := newFake(t, feishutest.WithClock(clk))
	ctx := testCtx(t)
	cli := newClient(srv, appID)
	id := *create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "").Data.MessageId

	approved := strings.Replace(card2, "pending", "approved", 1)
	expired := strings.Replace(card2, "pending", "expired", 1)
	for _, c := range []string{approved, expired} {
		r := patch(ctx, t, cli, id, c)
		mustOK(t, "patch", r, r.Code, r.Msg)
	}
	m, ok := srv.Message(id)
	if !ok || string(m.Current) != expired || string(m.Content) != card2 || len(m.Patches) != 2 ||
		string(m.Patches[0].Content) != approved || !m.Patches[0].Time.Equal(clk.Now()) {
		t.Errorf("after patches: %+v", m)
	}

	txt := *create(ctx, t, cli, "chat_id", "oc_1", "text", text, "").Data.MessageId
	unshared := *create(ctx, t, cli, "chat_id", "oc_1", "interactive", `{"elements":[]}`, "").Data.MessageId
	for name, tc := range map[string]struct{ id, content string }{
		"text message":  {txt, approved},
		"unshared card": {unshared, approved},
		"unknown":       {"om_missing", approved},
		"not JSON":      {id, "{"},
	} {
		r := patch(ctx, t, cli, tc.id, tc.content)
		if r.StatusCode != http.StatusBadRequest || r.Code != feishutest.CodeInvalidParam {
			t.Errorf("%s: %d %d %q, want 400 %d", name, r.StatusCode, r.Code, r.Msg, feishutest.CodeInvalidParam)
		}
	}
	clk.Advance(14*24*time.Hour + time.Second)
	if r := patch(ctx, t, cli, id, approved); r.Code != feishutest.CodeInvalidParam {
		t.Errorf("patch after 14 days: %d %q", r.Code, r.Msg)
	}
}

func TestCreateValidation(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	cli := newClient(srv, appID)
	long := `{"text":"` + strings.Repeat("x", 150<<10) + `"}`
	for name, tc := range map[string]struct {
		idType, content string
		code            int
	}{
		"bad receive_id_type": {"chat", text, feishutest.CodeFieldValidation},
		"content not JSON":    {"chat_id", "hello", feishutest.CodeInvalidParam},
		"text over 150 KB":    {"chat_id", long, feishutest.CodeContentTooLong},
	} {
		if r := create(ctx, t, cli, tc.idType, "oc_1", "text", tc.content, ""); r.StatusCode != http.StatusBadRequest || r.Code != tc.code {
			t.Errorf("%s: %d %d %q, want 400 %d", name, r.StatusCode, r.Code, r.Msg, tc.code)
		}
	}
	if n := len(srv.Messages()); n != 0 {
		t.Errorf("%d messages recorded from invalid requests", n)
	}
}

func TestRateLimitsReachTheSDK(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, appID := newFake(t, feishutest.WithClock(clk))
	ctx := testCtx(t)
	cli := newClient(srv, appID)

	var root string
	for i := range 5 {
		r := create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "")
		mustOK(t, fmt.Sprint("create ", i), r, r.Code, r.Msg)
		root = *r.Data.MessageId
	}
	limited := reply(ctx, t, cli, root, true, "") // same chat: the sixth message this second
	if limited.StatusCode != http.StatusTooManyRequests || limited.Code != feishutest.CodeRateLimited ||
		limited.Header.Get("x-ogw-ratelimit-reset") != "1" || limited.Header.Get("x-ogw-ratelimit-limit") != "5" {
		t.Fatalf("sixth message: %d %d %v", limited.StatusCode, limited.Code, limited.Header)
	}
	if r := create(ctx, t, cli, "chat_id", "oc_2", "text", text, ""); !r.Success() {
		t.Errorf("other chat limited: %d", r.Code)
	}
	clk.Advance(time.Second)
	if r := reply(ctx, t, cli, root, true, ""); !r.Success() {
		t.Errorf("after a second: %d", r.Code)
	}

	for i := range 5 {
		r := patch(ctx, t, cli, root, card2)
		mustOK(t, fmt.Sprint("patch ", i), r, r.Code, r.Msg)
	}
	clk.Advance(400 * time.Millisecond)
	if r := patch(ctx, t, cli, root, card2); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("x-ogw-ratelimit-reset") != "1" {
		t.Errorf("sixth patch: %d %d", r.StatusCode, r.Code)
	}
	if got := srv.RateLimited(); got != 2 {
		t.Errorf("RateLimited = %d, want 2", got)
	}
	if got := len(srv.Messages()); got != 7 {
		t.Errorf("messages = %d, want 7 (limited ones not sent)", got)
	}
}

func TestPerAppLimit(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, appID := newFake(t, feishutest.WithClock(clk), feishutest.WithRateLimits(feishutest.RateLimits{PerApp: 3}))
	ctx := testCtx(t)
	cli := newClient(srv, appID)
	for i := range 3 {
		create(ctx, t, cli, "chat_id", fmt.Sprint("oc_", i), "text", text, "")
	}
	if r := create(ctx, t, cli, "chat_id", "oc_9", "text", text, ""); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("fourth create in a second: %d %d", r.StatusCode, r.Code)
	}
}

func TestFailNext(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	cli := newClient(srv, appID)
	root := *create(ctx, t, cli, "chat_id", "oc_1", "interactive", card2, "").Data.MessageId

	srv.FailNext(feishutest.RouteReply, http.StatusTooManyRequests, feishutest.CodeRateLimited, 2500*time.Millisecond)
	srv.FailNext("/open-apis/im/v1/messages/"+root, http.StatusInternalServerError, 1, 0)
	r := reply(ctx, t, cli, root, true, "")
	if r.StatusCode != http.StatusTooManyRequests || r.Code != feishutest.CodeRateLimited || r.Header.Get("x-ogw-ratelimit-reset") != "3" {
		t.Errorf("injected 429: %d %d %v", r.StatusCode, r.Code, r.Header)
	}
	if r := reply(ctx, t, cli, root, true, ""); !r.Success() {
		t.Errorf("second reply: %d", r.Code)
	}
	if p := patch(ctx, t, cli, root, card2); p.StatusCode != http.StatusInternalServerError || p.Code != 1 {
		t.Errorf("injected 500: %d %d", p.StatusCode, p.Code)
	}
	if srv.RateLimited() != 1 || len(srv.Messages()) != 2 {
		t.Errorf("RateLimited %d, messages %d", srv.RateLimited(), len(srv.Messages()))
	}
}

// startWS runs a real long-connection client against srv until the test ends.
func startWS(t *testing.T, srv *feishutest.Server, appID string, disp *dispatcher.EventDispatcher) {
	t.Helper()
	disp.InitConfig(larkevent.WithLogLevel(larkcore.LogLevelError))
	ctx, cancel := context.WithCancel(context.Background())
	cli := larkws.NewClient(appID, secret, larkws.WithEventHandler(disp), larkws.WithDomain(srv.URL()),
		larkws.WithLogLevel(larkcore.LogLevelError))
	done := make(chan error, 1)
	go func() { done <- cli.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func recv[T any](ctx context.Context, t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("nothing received: %v", ctx.Err())
		panic("unreachable")
	}
}

func TestLongConnection(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	msgs := make(chan *larkim.P2MessageReceiveV1, 4)
	actions := make(chan *callback.CardActionTriggerEvent, 1)
	disp := dispatcher.NewEventDispatcher("", "").
		OnP2MessageReceiveV1(func(_ context.Context, ev *larkim.P2MessageReceiveV1) error {
			msgs <- ev
			return nil
		}).
		OnP2CardActionTrigger(func(_ context.Context, ev *callback.CardActionTriggerEvent) (*callback.CardActionTriggerResponse, error) {
			actions <- ev
			return &callback.CardActionTriggerResponse{
				Toast: &callback.Toast{Type: "success", Content: "Approved " + ev.Event.Action.Value["request_id"].(string)},
				Card:  &callback.Card{Type: "raw", Data: map[string]any{"schema": "2.0"}},
			}, nil
		})
	startWS(t, srv, appID, disp)

	ev := feishutest.MessageEvent{
		EventID: "ev_1", AppID: appID, SenderOpenID: "ou_alice", MessageID: "om_in1", ChatID: "oc_1",
		Text: "@_user_1 hi", Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: "ou_bot", Name: "bridge"}},
	}
	id, err := srv.PushEvent(ctx, ev.JSON())
	if err != nil {
		t.Fatal(err)
	}
	got := recv(ctx, t, msgs)
	m := got.Event.Message
	if got.EventV2Base.Header.EventID != "ev_1" || *m.MessageId != "om_in1" || *m.ChatId != "oc_1" || *m.ChatType != "group" ||
		*m.MessageType != "text" || *m.Content != `{"text":"@_user_1 hi"}` || *m.Mentions[0].Id.OpenId != "ou_bot" ||
		*got.Event.Sender.SenderId.OpenId != "ou_alice" {
		t.Errorf("event = %s", larkcore.Prettify(got))
	}
	if err := srv.WaitFor(ctx, func() bool { return len(srv.Responses(id)) == 1 }); err != nil {
		t.Fatal(err)
	}
	if r := srv.Responses(id)[0]; r.StatusCode != http.StatusOK || r.Data != nil || r.BizRT == "" {
		t.Errorf("event response = %+v", r)
	}

	again, err := srv.Redeliver(ctx, id)
	if err != nil || again == id {
		t.Fatalf("redeliver: %q %v", again, err)
	}
	if dup := recv(ctx, t, msgs); dup.EventV2Base.Header.EventID != "ev_1" {
		t.Errorf("redelivered event_id = %s", dup.EventV2Base.Header.EventID)
	}

	data, err := srv.PushCardAction(ctx, feishutest.CardAction{
		OperatorOpenID: "ou_alice", Value: map[string]any{"action": "approve", "request_id": "REQ-1"},
		MessageID: "om_card", ChatID: "oc_1",
	}.JSON())
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Toast struct{ Type, Content string }
		Card  struct {
			Type string
			Data map[string]any
		}
	}
	if err := json.Unmarshal(data, &resp); err != nil || resp.Toast.Content != "Approved REQ-1" || resp.Card.Type != "raw" {
		t.Errorf("card response %s: %v", data, err)
	}
	a := recv(ctx, t, actions)
	if a.Event.Operator.OpenID != "ou_alice" || a.Event.Context.OpenMessageID != "om_card" || a.Event.Context.OpenChatID != "oc_1" ||
		!strings.HasPrefix(a.Event.Token, "c-") || a.Event.Action.Tag != "button" {
		t.Errorf("card action = %s", larkcore.Prettify(a.Event))
	}

	// A gateway restart: the SDK reconnects through the endpoint and gets events again.
	srv.DisconnectClients()
	if err := srv.WaitFor(ctx, func() bool { return srv.Accepted() == 2 && srv.Connections() == 1 }); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.PushEvent(ctx, feishutest.MessageEvent{EventID: "ev_2", ChatID: "oc_1", Text: "back"}.JSON()); err != nil {
		t.Fatal(err)
	}
	if got := recv(ctx, t, msgs); got.EventV2Base.Header.EventID != "ev_2" {
		t.Errorf("after reconnect got %s", got.EventV2Base.Header.EventID)
	}

	// No handler for the type: the SDK answers 500.
	bad, err := srv.PushEvent(ctx, []byte(`{"schema":"2.0","header":{"event_id":"ev_x","event_type":"im.chat.disbanded_v1"},"event":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitFor(ctx, func() bool { return len(srv.Responses(bad)) == 1 }); err != nil {
		t.Fatal(err)
	}
	if r := srv.Responses(bad)[0]; r.StatusCode != http.StatusInternalServerError {
		t.Errorf("unhandled event answered %d", r.StatusCode)
	}
}

func TestLongConnectionDeliversToOneClientEach(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	var mu sync.Mutex
	counts := map[int]int{}
	total := make(chan struct{}, 4)
	for i := range 2 {
		startWS(t, srv, appID, dispatcher.NewEventDispatcher("", "").OnP2MessageReceiveV1(
			func(context.Context, *larkim.P2MessageReceiveV1) error {
				mu.Lock()
				counts[i]++
				mu.Unlock()
				total <- struct{}{}
				return nil
			}))
	}
	if err := srv.WaitFor(ctx, func() bool { return srv.Connections() == 2 }); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := srv.PushEvent(ctx, feishutest.MessageEvent{ChatID: "oc_1", Text: fmt.Sprint(i)}.JSON()); err != nil {
			t.Fatal(err)
		}
	}
	recv(ctx, t, total)
	recv(ctx, t, total)
	mu.Lock()
	defer mu.Unlock()
	if counts[0] != 1 || counts[1] != 1 {
		t.Errorf("deliveries per client = %v, want one each", counts)
	}
}

func TestCloseWithClientConnected(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	startWS(t, srv, appID, dispatcher.NewEventDispatcher("", ""))
	if err := srv.WaitFor(ctx, func() bool { return srv.Connections() == 1 }); err != nil {
		t.Fatal(err)
	}
	srv.Close() // TestMain checks that no goroutine of the fake survives
	if _, err := srv.PushEvent(ctx, feishutest.MessageEvent{}.JSON()); !errors.Is(err, feishutest.ErrClosed) {
		t.Errorf("push after Close = %v, want ErrClosed", err)
	}
	if _, err := srv.Redeliver(ctx, "msg_nope"); !errors.Is(err, feishutest.ErrUnknownFrame) {
		t.Errorf("redeliver unknown = %v", err)
	}
}

func TestLongConnectionRejectsWrongSecret(t *testing.T) {
	srv, appID := newFake(t)
	ctx := testCtx(t)
	cli := larkws.NewClient(appID, "wrong", larkws.WithDomain(srv.URL()), larkws.WithLogLevel(larkcore.LogLevelError))
	err := cli.Start(ctx)
	ce, ok := errors.AsType[*larkws.ClientError](err)
	if !ok || ce.Code != larkws.Forbidden {
		t.Errorf("Start with wrong secret = %v, want ClientError %d", err, larkws.Forbidden)
	}
}

func TestHTTPCallbackEncryptAndSign(t *testing.T) {
	const encryptKey, vtoken = "enc-key", "v-token"
	ctx := testCtx(t)
	msgs := make(chan *larkim.P2MessageReceiveV1, 1)
	disp := dispatcher.NewEventDispatcher(vtoken, encryptKey).
		OnP2MessageReceiveV1(func(_ context.Context, ev *larkim.P2MessageReceiveV1) error {
			msgs <- ev
			return nil
		}).
		OnP2CardActionTrigger(func(_ context.Context, ev *callback.CardActionTriggerEvent) (*callback.CardActionTriggerResponse, error) {
			return &callback.CardActionTriggerResponse{Toast: &callback.Toast{Type: "info", Content: ev.Event.Action.Value["action"].(string)}}, nil
		})
	disp.InitConfig(larkevent.WithLogLevel(larkcore.LogLevelError))
	bot := httptest.NewServer(http.HandlerFunc(httpserverext.NewEventHandlerFunc(disp, larkevent.WithLogLevel(larkcore.LogLevelError))))
	defer bot.Close()

	post := func(plain []byte, tamper bool) (int, string) {
		t.Helper()
		body, err := feishutest.Encrypt(encryptKey, plain)
		if err != nil {
			t.Fatal(err)
		}
		req, err := feishutest.SignedRequest(ctx, bot.URL, encryptKey, []byte(body), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if tamper {
			req.Header.Set(feishutest.HeaderSignature, strings.Repeat("0", 64))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := post(feishutest.MessageEvent{EventID: "ev_h", Token: vtoken, ChatID: "oc_1", Text: "hi"}.JSON(), false); code != http.StatusOK {
		t.Fatalf("message event: %d %s", code, body)
	}
	if ev := recv(ctx, t, msgs); ev.EventV2Base.Header.EventID != "ev_h" || *ev.Event.Message.Content != `{"text":"hi"}` {
		t.Errorf("decrypted event = %s", larkcore.Prettify(ev))
	}
	code, body := post(feishutest.CardAction{Token: vtoken, Value: map[string]any{"action": "deny"}}.JSON(), false)
	if code != http.StatusOK || body != `{"toast":{"type":"info","content":"deny"}}` {
		t.Errorf("card action: %d %s", code, body)
	}
	if code, body := post(feishutest.CardAction{Value: map[string]any{"action": "deny"}}.JSON(), true); code != http.StatusInternalServerError {
		t.Errorf("bad signature accepted: %d %s", code, body)
	}
}

func TestEncryptAndSignMatchTheSDK(t *testing.T) {
	plain := []byte(`{"schema":"2.0","header":{"event_id":"e"}}`)
	for _, p := range [][]byte{plain, []byte(`{"a":"0123456789abcd"}`)} { // the second is exactly one block
		body, err := feishutest.Encrypt("k", p)
		if err != nil {
			t.Fatal(err)
		}
		var env larkevent.EventEncryptMsg
		if err := json.Unmarshal([]byte(body), &env); err != nil {
			t.Fatal(err)
		}
		got, err := larkevent.EventDecrypt(env.Encrypt, "k")
		if err != nil || string(got) != string(p) {
			t.Errorf("EventDecrypt = %q, %v; want %q", got, err, p)
		}
	}
	if got, want := feishutest.Sign("1700000000", "n", "k", plain), larkevent.Signature("1700000000", "n", "k", string(plain)); got != want {
		t.Errorf("Sign = %s, SDK %s", got, want)
	}
}
