package slacktest_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
