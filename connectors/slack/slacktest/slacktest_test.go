package slacktest_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func newServer(t *testing.T, opts ...slacktest.Option) (*slacktest.Server, *slack.Client, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1795933853, 0)}
	srv := slacktest.NewServer(append([]slacktest.Option{slacktest.Clock(clk.Now)}, opts...)...)
	t.Cleanup(srv.Close)
	api := slack.New(slacktest.DefaultBotToken, slack.OptionAPIURL(srv.APIURL()),
		slack.OptionAppLevelToken(slacktest.DefaultAppToken))
	return srv, api, clk
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func slackErr(t *testing.T, err error, want string) {
	t.Helper()
	if resp, ok := errors.AsType[slack.SlackErrorResponse](err); !ok || resp.Err != want {
		t.Fatalf("err = %v, want Slack error %q", err, want)
	}
}

func TestPostThreadsAndEphemerals(t *testing.T) {
	srv, api, _ := newServer(t, slacktest.PostMessageLimit(0, 0)) // frozen clock, no limit
	ctx := ctxT(t)
	blocks := slack.NewActionBlock("approval:REQ-1", slack.NewButtonBlockElement("approve", "REQ-1",
		slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)))
	_, parent, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("REQ-1", false), slack.MsgOptionBlocks(blocks))
	if err != nil {
		t.Fatal(err)
	}
	_, r1, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("reply", false), slack.MsgOptionTS(parent))
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("loud", false), slack.MsgOptionTS(parent),
		slack.MsgOptionBroadcast())
	if err != nil {
		t.Fatal(err)
	}
	if !(parent < r1 && r1 < r2) || parent != "1795933853.000000" {
		t.Fatalf("ts not unique and increasing on a frozen clock: %s %s %s", parent, r1, r2)
	}
	th := srv.Thread("C1", parent)
	if len(th) != 3 || th[0].TS != parent || th[1].ThreadTS != parent || th[1].Text != "reply" || !th[2].Broadcast {
		t.Fatalf("thread = %+v", th)
	}
	if b, ok := th[0].Blocks[0].(*slack.ActionBlock); !ok || b.BlockID != "approval:REQ-1" || th[0].User != slacktest.BotUserID {
		t.Fatalf("parent blocks = %s", th[0].BlocksJSON)
	}
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false), slack.MsgOptionTS(r1))
	slackErr(t, err, "thread_not_found") // a reply is not a thread parent
	_, _, err = api.PostMessageContext(ctx, "C2", slack.MsgOptionText("x", false), slack.MsgOptionTS(parent))
	slackErr(t, err, "thread_not_found")
	_, _, err = api.PostMessageContext(ctx, "C1")
	slackErr(t, err, "no_text")

	human, err := srv.AddUserMessage("C1", "U1", "<@U0BOT> hi", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("hi", false), slack.MsgOptionTS(human)); err != nil {
		t.Fatalf("reply to a human message: %v", err)
	}
	if got := len(srv.Messages()); got != 5 {
		t.Fatalf("%d messages recorded, want 5", got)
	}

	ets, err := api.PostEphemeralContext(ctx, "C1", "U1", slack.MsgOptionText("only you", false))
	if eph := srv.Ephemerals(); err != nil || len(eph) != 1 || eph[0].User != "U1" || eph[0].TS != ets {
		t.Fatalf("ephemeral: %v %+v", err, eph)
	}
	ch, _, already, err := api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{"U1"}})
	if err != nil || ch.ID != "DU1" || already {
		t.Fatalf("conversations.open = %+v %v %v", ch, already, err)
	}
	if at, err := api.AuthTestContext(ctx); err != nil || at.UserID != slacktest.BotUserID {
		t.Fatalf("auth.test = %+v %v", at, err)
	}
	_, err = slack.New("xoxb-wrong", slack.OptionAPIURL(srv.APIURL())).AuthTestContext(ctx)
	slackErr(t, err, "invalid_auth")
}

func TestUpdate(t *testing.T) {
	srv, api, clk := newServer(t)
	ctx := ctxT(t)
	_, ts, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("pending", false),
		slack.MsgOptionBlocks(slack.NewDividerBlock()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionText("approved", false)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionBlocks()); err != nil {
		t.Fatal(err)
	}
	m, ok := srv.Message("C1", ts)
	if !ok || m.Text != "approved" || len(m.Blocks) != 0 || string(m.BlocksJSON) != "[]" || len(m.Updates) != 2 ||
		m.Updates[0].Text != "approved" || string(m.Updates[0].BlocksJSON) != `[{"type":"divider"}]` {
		t.Fatalf("message after updates = %+v", m)
	}
	_, _, _, err = api.UpdateMessageContext(ctx, "C1", "1.000001", slack.MsgOptionText("x", false))
	slackErr(t, err, "message_not_found")
}

func wantRateLimited(t *testing.T, err error, retry time.Duration) {
	t.Helper()
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); !ok || rl.RetryAfter != retry {
		t.Fatalf("err = %v, want RateLimitedError{%v}", err, retry)
	}
}

func TestRateLimits(t *testing.T) {
	srv, api, clk := newServer(t, slacktest.UpdateLimit(time.Minute/50, 2), slacktest.PostMessageLimit(time.Second, 1))
	ctx := ctxT(t)
	post := func(ch string) (string, error) {
		_, ts, err := api.PostMessageContext(ctx, ch, slack.MsgOptionText("m", false))
		return ts, err
	}
	ts, err := post("C1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = post("C1")
	wantRateLimited(t, err, time.Second)
	ts2, err := post("C2")
	if err != nil {
		t.Fatalf("other channel: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := post("C1"); err != nil {
		t.Fatalf("after 1s: %v", err)
	}

	upd := func(ch, ts string) error {
		_, _, _, err := api.UpdateMessageContext(ctx, ch, ts, slack.MsgOptionText("u", false))
		return err
	}
	if err := upd("C1", ts); err != nil {
		t.Fatal(err)
	}
	wantRateLimited(t, upd("C1", ts), time.Second) // StrictEditSpacing: same message within 1s
	clk.Advance(time.Second)
	if err := upd("C1", ts); err != nil {
		t.Fatal(err)
	}
	// Tier 3 (burst 2, 1.2s) is per app: the next slot is 0.2s away; Retry-After is at least 1s.
	wantRateLimited(t, upd("C2", ts2), time.Second)
	if got := [2]int{srv.RateLimited("chat.postMessage"), srv.RateLimited("chat.update")}; got != [2]int{1, 2} {
		t.Fatalf("RateLimited = %v, want [1 2]", got)
	}
	if m, _ := srv.Message("C1", ts); len(m.Updates) != 2 {
		t.Fatalf("rejected updates were applied: %+v", m.Updates)
	}
}

// By default chat.postMessage takes a burst of two posts into a channel
// (Slack tolerates short bursts), then one a second: the third at once is
// a 429, one more a second later passes, and the next at that instant is
// a 429 again.
func TestPostMessageToleratesABurstOfTwo(t *testing.T) {
	srv, api, clk := newServer(t)
	ctx := ctxT(t)
	post := func() error {
		_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("m", false))
		return err
	}
	for i := range 2 {
		if err := post(); err != nil {
			t.Fatalf("post %d of the burst: %v", i+1, err)
		}
	}
	wantRateLimited(t, post(), time.Second)
	clk.Advance(time.Second)
	if err := post(); err != nil {
		t.Fatalf("a second later: %v", err)
	}
	wantRateLimited(t, post(), time.Second)
	clk.Advance(500 * time.Millisecond)
	wantRateLimited(t, post(), time.Second) // the next slot is 0.5 s away; Retry-After is at least 1 s
	if n := srv.RateLimited("chat.postMessage"); n != 3 {
		t.Errorf("RateLimited = %d, want 3", n)
	}
}

func TestFailNext(t *testing.T) {
	srv, api, _ := newServer(t)
	ctx := ctxT(t)
	srv.FailNext("chat.postMessage", http.StatusServiceUnavailable, 0)
	srv.FailNext("chat.postMessage", http.StatusTooManyRequests, 7*time.Second)
	srv.FailNextError("chat.postMessage", "channel_not_found")
	_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("m", false))
	if sc, ok := errors.AsType[slack.StatusCodeError](err); !ok || sc.Code != http.StatusServiceUnavailable {
		t.Fatalf("err = %v, want 503", err)
	}
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("m", false))
	wantRateLimited(t, err, 7*time.Second)
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("m", false))
	slackErr(t, err, "channel_not_found")
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("m", false)); err != nil {
		t.Fatal(err)
	}
	if srv.Calls("chat.postMessage") != 4 || srv.RateLimited("chat.postMessage") != 1 || len(srv.Messages()) != 1 {
		t.Fatalf("calls=%d rateLimited=%d messages=%d", srv.Calls("chat.postMessage"),
			srv.RateLimited("chat.postMessage"), len(srv.Messages()))
	}
}

// A lost answer: the call is carried out (the message posted), and the
// client gets a transport error, not an answer of Slack's.
func TestLoseNextAnswer(t *testing.T) {
	srv, api, _ := newServer(t, slacktest.PostMessageLimit(0, 0))
	ctx := ctxT(t)
	srv.LoseNextAnswer("chat.postMessage")
	_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("lost", false))
	_, isSlack := errors.AsType[slack.SlackErrorResponse](err)
	_, isStatus := errors.AsType[slack.StatusCodeError](err)
	if err == nil || isSlack || isStatus {
		t.Fatalf("err = %v, want a transport error", err)
	}
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("answered", false)); err != nil {
		t.Fatal(err)
	}
	if ms := srv.Messages(); len(ms) != 2 || ms[0].Text != "lost" {
		t.Fatalf("messages %+v, want the lost call's and the next", ms)
	}
}

// nextEvent reads smc.Events until an event of type typ arrives.
func nextEvent(t *testing.T, ctx context.Context, smc *socketmode.Client, typ socketmode.EventType) socketmode.Event {
	t.Helper()
	for {
		select {
		case ev := <-smc.Events:
			if ev.Type == typ {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", typ, ctx.Err())
		}
	}
}

func TestSocketMode(t *testing.T) {
	srv, api, _ := newServer(t)
	ctx := ctxT(t)
	smc := socketmode.New(api)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- smc.RunContext(runCtx) }()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("RunContext = %v", err)
		}
	}()
	nextEvent(t, ctx, smc, socketmode.EventTypeHello)

	env, err := srv.PushEventsAPI(ctx, slacktest.AppMentionEvent("Ev1", "C1", "U1", "<@U0BOT> deploy", "1795933853.000100", ""))
	if err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, ctx, smc, socketmode.EventTypeEventsAPI)
	api1 := ev.Data.(slackevents.EventsAPIEvent)
	mention, ok := api1.InnerEvent.Data.(*slackevents.AppMentionEvent)
	if ev.Request.EnvelopeID != env || api1.Data.(*slackevents.EventsAPICallbackEvent).EventID != "Ev1" || !ok ||
		mention.Text != "<@U0BOT> deploy" || ev.Request.RetryAttempt != 0 {
		t.Fatalf("event = %+v", ev)
	}
	if srv.Acked(env) {
		t.Fatal("acked before the client acked")
	}
	smc.Ack(*ev.Request)
	if _, err := srv.WaitAck(ctx, env); err != nil {
		t.Fatal(err)
	}

	env2, err := srv.Redeliver(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, ctx, smc, socketmode.EventTypeEventsAPI)
	if ev.Request.EnvelopeID != env2 || ev.Request.RetryAttempt != 1 || ev.Request.RetryReason != "timeout" ||
		ev.Data.(slackevents.EventsAPIEvent).Data.(*slackevents.EventsAPICallbackEvent).EventID != "Ev1" {
		t.Fatalf("redelivery = %+v", ev.Request)
	}

	// A reconnect between deliveries: the next envelope goes to the new connection.
	if err := srv.Disconnect("refresh_requested"); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitFor(ctx, func(s *slacktest.Server) bool { return s.Connects() == 2 && s.Connections() == 1 }); err != nil {
		t.Fatal(err)
	}
	env3, err := srv.PushInteractive(ctx, slacktest.BlockActionsPayload("U1", "C1", "1795933853.000100", "",
		"approval:REQ-1", "approve", "REQ-1"))
	if err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, ctx, smc, socketmode.EventTypeInteractive)
	cb := ev.Data.(slack.InteractionCallback)
	if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) != 1 ||
		cb.ActionCallback.BlockActions[0].Value != "REQ-1" || cb.Container.MessageTs != "1795933853.000100" {
		t.Fatalf("interaction = %+v", cb)
	}
	if err := smc.Ack(*ev.Request, map[string]string{"text": "ok"}); err != nil {
		t.Fatal(err)
	}
	payload, err := srv.WaitAck(ctx, env3)
	if err != nil || !bytes.Equal(payload, []byte(`{"text":"ok"}`)) {
		t.Fatalf("ack payload = %s, %v", payload, err)
	}
	if envs := srv.Envelopes(); len(envs) != 3 || envs[1].Acks != 0 || envs[2].Acks != 1 {
		t.Fatalf("envelopes = %+v", envs)
	}
}

func TestSignatureAndPayloads(t *testing.T) {
	body := slacktest.AppMentionEvent("Ev9", "C1", "U1", "hi", "1795933853.000200", "1795933853.000100")
	req, _ := http.NewRequest(http.MethodPost, "http://x/events", bytes.NewReader(body))
	slacktest.SignRequest(req, body, "s3cret", time.Now())
	for _, tc := range []struct {
		secret string
		ok     bool
	}{{"s3cret", true}, {"other", false}} {
		sv, err := slack.NewSecretsVerifier(req.Header, tc.secret)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = sv.Write(body)
		if err := sv.Ensure(); (err == nil) != tc.ok {
			t.Fatalf("secret %q: Ensure = %v", tc.secret, err)
		}
	}
	ev, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
	if m, ok := ev.InnerEvent.Data.(*slackevents.AppMentionEvent); err != nil || !ok || m.ThreadTimeStamp != "1795933853.000100" {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	ev, err = slackevents.ParseEvent(slacktest.MessageEvent("Ev10", "DU1", "U1", "hi", "1.000001", ""),
		slackevents.OptionNoVerifyToken())
	if m, ok := ev.InnerEvent.Data.(*slackevents.MessageEvent); err != nil || !ok || m.ChannelType != "im" {
		t.Fatalf("ParseEvent(message) = %+v, %v", ev, err)
	}
	ev, err = slackevents.ParseEvent(slacktest.URLVerification("chal"), slackevents.OptionNoVerifyToken())
	if uv, ok := ev.Data.(*slackevents.EventsAPIURLVerificationEvent); err != nil || !ok || uv.Challenge != "chal" {
		t.Fatalf("url_verification = %+v, %v", ev, err)
	}
	form := slacktest.InteractivityForm(slacktest.BlockActionsPayload("U1", "C1", "2.000001", "1.000001", "b", "deny", "REQ-2"))
	r, _ := http.NewRequest(http.MethodPost, "http://x/interact", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cb, err := slack.InteractionCallbackParse(r)
	if err != nil || len(cb.ActionCallback.BlockActions) != 1 || cb.ActionCallback.BlockActions[0].ActionID != "deny" ||
		cb.Container.ThreadTs != "1.000001" || cb.User.ID != "U1" {
		t.Fatalf("InteractionCallbackParse = %+v, %v", cb, err)
	}
}

func TestCloseWithLiveClient(t *testing.T) {
	srv, api, _ := newServer(t)
	ctx := ctxT(t)
	smc := socketmode.New(api)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = smc.RunContext(runCtx) }()
	go func() { // drain events until the client stops
		for {
			select {
			case <-smc.Events:
			case <-runCtx.Done():
				return
			}
		}
	}()
	if err := srv.WaitFor(ctx, func(s *slacktest.Server) bool { return s.Connections() == 1 }); err != nil {
		t.Fatal(err)
	}
	srv.Close() // must not hang with a client attached
	if srv.Connections() != 0 {
		t.Fatal("connection survived Close")
	}
	if _, err := srv.PushEventsAPI(ctx, []byte(`{}`)); !errors.Is(err, slacktest.ErrClosed) {
		t.Fatalf("push after Close = %v, want ErrClosed", err)
	}
}
