package feishutest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
