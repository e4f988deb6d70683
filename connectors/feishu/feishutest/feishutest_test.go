package feishutest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lark "github.com/larksuite/oapi-sdk-go/v3"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

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
