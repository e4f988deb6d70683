package feishutest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	"github.com/larksuite/oapi-sdk-go/v3/core/httpserverext"
	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

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
