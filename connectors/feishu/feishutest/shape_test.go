package feishutest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/internal/jsonshape"
)

// TestShapesAsRecorded holds the fake's answers, route by route, to the
// answers the Open API gave as oapi-sdk-go's tests record them
// (testdata/platforms/feishu/openapi, ws): every recorded field is in the
// fake's answer, with the same JSON type.
func TestShapesAsRecorded(t *testing.T) {
	srv := feishutest.New("cli_shape", "shape-secret")
	defer srv.Close()
	call := func(method, path, token string, body any) []byte {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(method, srv.URL()+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tokenAnswer := call(http.MethodPost, feishutest.RouteToken, "", map[string]string{"app_id": "cli_shape", "app_secret": "shape-secret"})
	var tok struct {
		Token string `json:"tenant_access_token"`
	}
	if err := json.Unmarshal(tokenAnswer, &tok); err != nil || tok.Token == "" {
		t.Fatalf("token answer %s: %v", tokenAnswer, err)
	}
	for _, tc := range []struct {
		route, recorded string
		answer          []byte
		known           []string // differences the package doc explains
	}{
		{feishutest.RouteToken, "openapi/auth.v3.tenant_access_token.ok.json", tokenAnswer, nil},
		{feishutest.RouteCreate, "openapi/im.v1.messages.create.ok.json", call(http.MethodPost,
			feishutest.RouteCreate+"?receive_id_type=chat_id", tok.Token,
			map[string]string{"receive_id": "oc_shape", "msg_type": "text", "content": `{"text":"hello"}`}), nil},
		{feishutest.RouteBotInfo, "openapi/bot.v3.info.ok.json", call(http.MethodGet, feishutest.RouteBotInfo, tok.Token, nil), nil},
		{feishutest.RouteWSEndpoint, "ws/callback.ws.endpoint.ok.json", call(http.MethodPost, feishutest.RouteWSEndpoint, "",
			map[string]string{"AppID": "cli_shape", "AppSecret": "shape-secret"}), []string{"$.data.url: not in the recorded answer"}},
	} {
		t.Run(strings.TrimPrefix(tc.route, "/"), func(t *testing.T) {
			recorded, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "platforms", "feishu", filepath.FromSlash(tc.recorded)))
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := jsonshape.Diff(recorded, tc.answer, true)
			if err != nil {
				t.Fatalf("%v (answer %s)", err, tc.answer)
			}
			if strings.Join(diffs, "\n") != strings.Join(tc.known, "\n") {
				t.Fatalf("the recorded answer's fields missing from the fake's (\"not in the recorded answer\" reads \"not in the fake's\"):\n%s\nwant only %q\nanswer: %s",
					strings.Join(diffs, "\n"), tc.known, tc.answer)
			}
		})
	}
}

// TestFramesAsRecorded holds the fake's long-connection frames to the frames
// oapi-sdk-go's tests put on the wire (testdata/platforms/feishu/ws): the
// same frame method, every recorded header (by key), and every field of a
// recorded JSON payload with its type (the pong's ClientConfig; an event
// frame's payload is the event pushed).
func TestFramesAsRecorded(t *testing.T) {
	srv := feishutest.New("cli_frames", "frames-secret")
	defer srv.Close()
	ws := dialWS(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	read := func() *larkws.Frame {
		t.Helper()
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var f larkws.Frame
		if err := f.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		return &f
	}
	if _, err := srv.PushEvent(ctx, []byte(`{"header":{"event_type":"test.event"}}`)); err != nil {
		t.Fatal(err)
	}
	event := read()
	ping, err := larkws.NewPingFrame(0).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, ping); err != nil {
		t.Fatal(err)
	}
	pong := read()
	for _, tc := range []struct {
		recorded string
		frame    *larkws.Frame
		payload  bool // compare the payloads' JSON shapes
	}{
		{"event_frame.pb", event, false},
		{"pong_frame.pb", pong, true},
	} {
		t.Run(tc.recorded, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "platforms", "feishu", "ws", tc.recorded))
			if err != nil {
				t.Fatal(err)
			}
			var rec larkws.Frame
			if err := rec.Unmarshal(raw); err != nil {
				t.Fatal(err)
			}
			if rec.Method != tc.frame.Method {
				t.Errorf("method %d, recorded %d", tc.frame.Method, rec.Method)
			}
			for _, h := range rec.Headers {
				if larkws.Headers(tc.frame.Headers).GetString(h.Key) == "" {
					t.Errorf("recorded header %q missing from the fake's frame (headers %v)", h.Key, tc.frame.Headers)
				}
			}
			if !tc.payload {
				return
			}
			diffs, err := jsonshape.Diff(rec.Payload, tc.frame.Payload, true)
			if err != nil || len(diffs) > 0 {
				t.Errorf("payload %s: %v %s", tc.frame.Payload, err, strings.Join(diffs, "\n"))
			}
		})
	}
}

// dialWS opens a long connection to srv as the SDK does: the URL of the
// endpoint route, then a WebSocket.
func dialWS(t *testing.T, srv *feishutest.Server) *websocket.Conn {
	t.Helper()
	b, err := json.Marshal(map[string]string{"AppID": "cli_frames", "AppSecret": "frames-secret"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL()+feishutest.RouteWSEndpoint, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ep larkws.EndpointResp
	if err := json.NewDecoder(resp.Body).Decode(&ep); err != nil || ep.Data == nil || ep.Data.Url == "" {
		t.Fatalf("endpoint: %v (%+v)", err, ep)
	}
	ws, _, err := websocket.DefaultDialer.Dial(ep.Data.Url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// TestEventsAsRecorded holds the events the fake pushes to the recorded
// ones: an im.message.receive_v1 with every part set has every field of
// Feishu's documentation sample, with its type; a card.action.trigger has
// only fields the SDK's card 2.0 payload has, with their types (the
// recording is a link preview's callback, with fields a button click in a
// message card does not carry: context.url, preview_token, delivery_type,
// action.option and input_value).
func TestEventsAsRecorded(t *testing.T) {
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "platforms", "feishu", filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	message := feishutest.MessageEvent{Token: "v", AppID: "cli_shape", TenantKey: "tk", SenderOpenID: "ou_sender",
		RootID: "om_root", ParentID: "om_root", ChatID: "oc_chat", ThreadID: "omt_1", Text: "@_user_1 hello",
		Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: "ou_tom", Name: "Tom", MentionedType: "user"}}}.JSON()
	if diffs, err := jsonshape.Diff(read("events/im.message.receive_v1.doc_sample.json"), message, true); err != nil || len(diffs) > 0 {
		t.Errorf("the recorded message event's fields missing from the fake's (\"not in the recorded answer\" reads \"not in the fake's\"): %v\n%s\nevent: %s",
			err, strings.Join(diffs, "\n"), message)
	}
	card := feishutest.CardAction{Token: "v", AppID: "cli_shape", TenantKey: "tk", OperatorOpenID: "ou_clicker",
		Name: "approve", Value: map[string]any{"approve": true}, MessageID: "om_card", ChatID: "oc_chat"}.JSON()
	recorded := fmt.Appendf(nil, string(read("cards/card.action.trigger.v2.tmpl.json")), "evt_card_1", "om_card_1", "oc_card_1")
	// The SDK's card payload has a partial header; the header of schema 2.0
	// is the message event's.
	for _, part := range []struct {
		key      string
		recorded []byte
	}{{"event", recorded}, {"header", read("events/im.message.receive_v1.doc_sample.json")}} {
		diffs, err := jsonshape.Diff(field(t, card, part.key), field(t, part.recorded, part.key), true)
		if err != nil || len(diffs) > 0 {
			t.Errorf("fields of the fake's card action %s the recorded one lacks: %v\n%s\ncallback: %s",
				part.key, err, strings.Join(diffs, "\n"), card)
		}
	}
}

// field returns the value of key in the JSON object doc.
func field(t *testing.T, doc []byte, key string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil || m[key] == nil {
		t.Fatalf("no %s in %s: %v", key, doc, err)
	}
	return m[key]
}
