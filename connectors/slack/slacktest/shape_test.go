package slacktest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/internal/jsonshape"
)

// TestShapesAsRecorded holds the fake's answers, method by method, to the
// answers Slack gave as the SDKs recorded them (testdata/platforms/slack):
// the same fields with the same JSON types. Every field of a concrete
// recorded answer (chat.postMessage: slack-go's fixture, which records some
// of the fields; the stream methods: python-slack-sdk's) must be in the
// fake's, with its type; a java-slack-sdk
// schema sample (the union of the fields Slack answered with, values
// blanked) must contain every field of the fake's answer, with its type.
func TestShapesAsRecorded(t *testing.T) {
	srv := slacktest.NewServer()
	defer srv.Close()
	post := func(method, token string, form url.Values) []byte {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.APIURL()+method, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	parent := post("chat.postMessage", slacktest.DefaultBotToken, url.Values{"channel": {"C0"}, "text": {"parent"}})
	bot := func(method string, form url.Values) []byte { return post(method, slacktest.DefaultBotToken, form) }
	// The stream goes to another channel: the fake spaces posts per channel.
	streamParent := bot("chat.postMessage", url.Values{"channel": {"C1"}, "text": {"parent"}})
	started := bot("chat.startStream", url.Values{"channel": {"C1"}, "thread_ts": {tsOf(t, streamParent)},
		"recipient_user_id": {"U0MEMBER"}, "recipient_team_id": {slacktest.TeamID}})
	stream := url.Values{"channel": {"C1"}, "ts": {tsOf(t, started)}, "markdown_text": {"more"}}
	appended := bot("chat.appendStream", stream)
	stopped := bot("chat.stopStream", url.Values{"channel": {"C1"}, "ts": {tsOf(t, started)}})
	for _, tc := range []struct {
		method, recorded string
		schema           bool // recorded is a schema sample: the fake's fields must be in it
		answer           []byte
	}{
		{"chat.postMessage", "chat.postMessage.ok.json", false, post("chat.postMessage", slacktest.DefaultBotToken,
			url.Values{"channel": {"C0"}, "text": {"hello"}, "thread_ts": {tsOf(t, parent)}})},
		{"auth.test", "auth.test.schema.json", true, post("auth.test", slacktest.DefaultBotToken, nil)},
		{"apps.connections.open", "apps.connections.open.schema.json", true,
			post("apps.connections.open", slacktest.DefaultAppToken, nil)},
		{"chat.update", "chat.update.schema.json", true,
			bot("chat.update", url.Values{"channel": {"C0"}, "ts": {tsOf(t, parent)}, "text": {"edited"}})},
		{"chat.postEphemeral", "chat.postEphemeral.schema.json", true,
			bot("chat.postEphemeral", url.Values{"channel": {"C0"}, "user": {"U0MEMBER"}, "text": {"psst"}})},
		{"chat.startStream", "chat.startStream.schema.json", true, started},
		{"chat.appendStream", "chat.appendStream.schema.json", true, appended},
		// python-slack-sdk's recorded answer of the stream methods.
		{"chat.startStream", "chat.stream.ok.json", false, started},
		{"chat.appendStream", "chat.stream.ok.json", false, appended},
		{"chat.stopStream", "chat.stream.ok.json", false, stopped},
	} {
		t.Run(tc.method+"/"+tc.recorded, func(t *testing.T) {
			recorded, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "platforms", "slack", "webapi", tc.recorded))
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := jsonshape.Diff(recorded, tc.answer, true)
			if tc.schema {
				diffs, err = jsonshape.Diff(tc.answer, recorded, true)
			}
			if err != nil {
				t.Fatalf("%v (answer %s)", err, tc.answer)
			}
			if len(diffs) > 0 {
				t.Fatalf("the fake's %s answer differs from the recorded one:\n%s\nanswer: %s",
					tc.method, strings.Join(diffs, "\n"), tc.answer)
			}
		})
	}
}

func tsOf(t *testing.T, answer []byte) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(answer), `"ts":"`)
	ts, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("no ts in %s", answer)
	}
	return ts
}

// TestSocketFramesAsRecorded holds the fake's Socket Mode frames to the
// frames slack-go's tests record (testdata/platforms/slack/socket): every
// field of a recorded frame is in the fake's, with its JSON type. The fake's
// envelopes carry the recorded payloads, so the comparison reaches into
// them too.
func TestSocketFramesAsRecorded(t *testing.T) {
	srv := slacktest.NewServer()
	defer srv.Close()
	recorded := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "platforms", "slack", "socket", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	payload := func(frame []byte) []byte {
		t.Helper()
		var f struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(frame, &f); err != nil {
			t.Fatal(err)
		}
		return f.Payload
	}
	ws := dialSocket(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	push := func(do func() error) []byte {
		t.Helper()
		if err := do(); err != nil {
			t.Fatal(err)
		}
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	_, hello, err := ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	events := recorded("events_api_app_mention.json")
	interactive := recorded("interactive_view_submission.json")
	for _, tc := range []struct {
		recorded string
		frame    []byte
	}{
		{"hello.json", hello},
		{"events_api_app_mention.json", push(func() error { _, err := srv.PushEventsAPI(ctx, payload(events)); return err })},
		{"interactive_view_submission.json", push(func() error {
			_, err := srv.PushInteractive(ctx, payload(interactive))
			return err
		})},
		{"disconnect.json", push(func() error { return srv.Disconnect("warning") })},
	} {
		t.Run(tc.recorded, func(t *testing.T) {
			diffs, err := jsonshape.Diff(recorded(tc.recorded), tc.frame, true)
			if err != nil {
				t.Fatalf("%v (frame %s)", err, tc.frame)
			}
			if len(diffs) > 0 {
				t.Fatalf("the recorded frame's fields missing from the fake's (\"not in the recorded answer\" reads \"not in the fake's\"):\n%s\nframe: %s",
					strings.Join(diffs, "\n"), tc.frame)
			}
		})
	}
}

// dialSocket opens a Socket Mode connection to srv as slack-go does: the URL
// of apps.connections.open, then a WebSocket.
func dialSocket(t *testing.T, srv *slacktest.Server) *websocket.Conn {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.APIURL()+"apps.connections.open", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+slacktest.DefaultAppToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var open struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&open); err != nil || open.URL == "" {
		t.Fatalf("apps.connections.open: %v (url %q)", err, open.URL)
	}
	ws, _, err := websocket.DefaultDialer.Dial(open.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}
