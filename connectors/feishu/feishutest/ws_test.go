package feishutest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

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
