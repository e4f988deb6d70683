package slack

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	slackgo "github.com/slack-go/slack"

	"github.com/roombridge/roombridge/chat"
)

// The corpus of real payloads (testdata/platforms/slack, see its README)
// through the connector's own decoding: every Events API body and
// interaction payload is posted, signed, to the events-mode webhooks (the
// code Slack's HTTP requests run through; Socket Mode hands the same
// slack-go values to the same fromEventsAPI and fromInteraction), and must
// become the chat.Event the table says or nothing, never a panic or a 5xx.

// corpusDir is the Slack part of the corpus.
var corpusDir = filepath.Join("..", "..", "testdata", "platforms", "slack")

// corpusWant is what one corpus file becomes: the status, and the events
// (none: acknowledged and dropped).
type corpusWant struct {
	status int
	events []chat.Event
}

func reply(id, channel, user, text, thread string) chat.Event {
	return chat.Event{Kind: chat.Reply, Surface: chat.Slack, ID: id, Channel: channel, User: "slack:" + user, Text: text,
		Thread: &chat.ThreadRef{Surface: chat.Slack, Channel: channel, ID: thread}}
}

func ask(id, channel, user, text, ts string) chat.Event {
	return chat.Event{Kind: chat.Ask, Surface: chat.Slack, ID: id, Channel: channel, User: "slack:" + user, Text: text, Message: ts}
}

// corpusWants covers every inbound file of the corpus (a file missing here
// fails the test). Inner events are wrapped in an event_callback whose
// event_id is "Ev-" and the file's name.
var corpusWants = map[string]corpusWant{
	"events/app_mention_action_token.json": {200, []chat.Event{ask("Ev08MFMKH6", "C0LAN2Q65", "UXXXXXXX1", "search slack", "1515449522.000016")}},
	// No channel and no text: nothing to answer, nowhere to answer it.
	"events/app_mention_no_text.json": {200, nil},
	"events/url_verification.json":    {200, nil},
	"events/app_rate_limited.json":    {200, nil},
	"events/inner/app_mention_thread_ts_is_ts.json": {200, []chat.Event{
		ask("Ev-app_mention_thread_ts_is_ts", "C0LAN2Q65", "U061F7AUR", "is it everything a river should be?", "1515449522.000016")}},
	"events/inner/app_mention_action_token.json": {200, []chat.Event{
		ask("Ev-app_mention_action_token", "C0LAN2Q65", "U061F7AUR", "search slack", "1515449522.000016")}},
	// Edits and deletions of top-level messages: the core follows an ask's.
	"events/inner/message_changed.json": {200, []chat.Event{{Kind: chat.Edit, Surface: chat.Slack, ID: "Ev-message_changed",
		Channel: "G024BE91L", User: "slack:U123ABC456", Text: "Live long and prospect.", Message: "1355517523.000005"}}},
	"events/inner/message_changed_rtm.json": {200, []chat.Event{{Kind: chat.Edit, Surface: chat.Slack, ID: "Ev-message_changed_rtm",
		Channel: "C2147483705", User: "slack:U2147483697", Text: "Hello, world!", Message: "1355517523.000005"}}},
	"events/inner/message_deleted.json": {200, []chat.Event{{Kind: chat.Delete, Surface: chat.Slack, ID: "Ev-message_deleted",
		Channel: "C2147483705", Message: "1358878749.000002"}}},
	"events/inner/bot_message.json":           {200, nil},
	"events/inner/message_simple.json":        {200, nil}, // top-level chatter
	"events/inner/message_thread_parent.json": {200, nil},
	"events/inner/message_file_share.json":    {200, nil}, // top level, and no channel
	"events/inner/thread_broadcast.json": {200, []chat.Event{reply("Ev-thread_broadcast", "C123ABC456", "U123ABC456",
		"broadcasting this reply", "1673464730.703009")}},
	// A thread reply as slack-go records it carries no channel (an
	// RTM-style message): a reply that names no channel cannot be routed.
	"events/inner/message_thread_reply.json": {200, nil},
	// Clicks without a user (or without a button) are not the bridge's.
	"interactions/block_actions_multi_conversations_select.json": {200, nil},
	"interactions/block_actions_user_only.json":                  {200, nil},
	"interactions/block_actions_button_in_view.json":             {200, nil},
}

// corpusFiles lists the inbound files under dir of the corpus.
func corpusFiles(t testing.TB, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		paths, err := filepath.Glob(filepath.Join(corpusDir, d, "*.json"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no corpus files in %s: %v", d, err)
		}
		for _, p := range paths {
			rel, _ := filepath.Rel(corpusDir, p)
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out
}

// corpusBody returns the webhook path, content type and body that Slack
// would send for a corpus file.
func corpusBody(t testing.TB, name string) (path, contentType string, body []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(corpusDir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasPrefix(name, "interactions/"):
		return "/slack/interactivity", "application/x-www-form-urlencoded", []byte(url.Values{"payload": {string(raw)}}.Encode())
	case strings.HasPrefix(name, "events/inner/"):
		id := "Ev-" + strings.TrimSuffix(filepath.Base(name), ".json")
		wrapped, err := json.Marshal(map[string]any{"type": "event_callback", "event_id": id, "event_time": 1,
			"team_id": "T0", "api_app_id": "A0", "event": json.RawMessage(raw)})
		if err != nil {
			t.Fatal(err)
		}
		return "/slack/events", "application/json", wrapped
	}
	return "/slack/events", "application/json", raw
}

func TestCorpusInbound(t *testing.T) {
	c, routes, rs := fuzzConnector(t)
	for _, name := range corpusFiles(t, "events", "events/inner", "interactions") {
		t.Run(name, func(t *testing.T) {
			want, ok := corpusWants[name]
			if !ok {
				t.Fatalf("no expectation for corpus file %s", name)
			}
			path, ct, body := corpusBody(t, name)
			h := routes[EventsPattern]
			if path == "/slack/interactivity" {
				h = routes[InteractivityPattern]
			}
			status := post(h, path, ct, body, signNow(body))
			rs.check(t, status)
			got := drain(c.inbound)
			if status != want.status {
				t.Fatalf("answered %d, want %d", status, want.status)
			}
			for _, ev := range got {
				checkEvent(t, ev)
			}
			if !slices.EqualFunc(got, want.events, eventsEqual) {
				t.Fatalf("events:\n got %s\nwant %s", show(got), show(want.events))
			}
		})
	}
}

// TestCorpusURLVerification: the recorded challenge is answered as it came.
func TestCorpusURLVerification(t *testing.T) {
	_, routes, _ := fuzzConnector(t)
	_, ct, body := corpusBody(t, "events/url_verification.json")
	req := httptest.NewRequest(http.MethodPost, "/slack/events", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", ct)
	signNow(body)(req)
	w := httptest.NewRecorder()
	routes[EventsPattern].ServeHTTP(w, req)
	if w.Code != http.StatusOK || w.Body.String() != "aljdsflaji3jj" {
		t.Fatalf("answered %d %q, want 200 and the challenge", w.Code, w.Body.String())
	}
}

func eventsEqual(a, b chat.Event) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func show(evs []chat.Event) string {
	b, _ := json.Marshal(evs)
	return string(b)
}

// TestCorpusWebAPIAnswers serves each recorded Web API answer to the real
// slack-go client through the connector's own call path (StartThread, a
// chat.postMessage) and checks what the connector makes of it: the
// recorded ts, a *chat.RetryAfterError of the recorded Retry-After, a
// permanent or a retried error.
func TestCorpusWebAPIAnswers(t *testing.T) {
	for _, tc := range []struct {
		file  string
		check func(t *testing.T, ts string, err error)
	}{
		{"chat.postMessage.ok.json", func(t *testing.T, ts string, err error) {
			if err != nil || ts != "1503435956.000247" {
				t.Fatalf("ts %q, error %v; want the recorded ts", ts, err)
			}
		}},
		{"ratelimited.429.json", func(t *testing.T, _ string, err error) {
			var ra *chat.RetryAfterError
			if !errors.As(err, &ra) || ra.After != 2*time.Second {
				t.Fatalf("error %v; want a *chat.RetryAfterError after 2s", err)
			}
		}},
		{"missing_scope.json", func(t *testing.T, _ string, err error) {
			var se slackgo.SlackErrorResponse
			if !errors.As(err, &se) || se.Err != "missing_scope" || errors.Is(err, chat.ErrPermanent) {
				t.Fatalf("error %v; want missing_scope, retried (fixing the scopes loses nothing)", err)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := corpusAPI(t, map[string]string{"/chat.postMessage": tc.file})
			_, m, err := c.StartThread(t.Context(), "CXXX", chat.Message{Text: "hello"})
			tc.check(t, m.ID, err)
		})
	}
}

// corpusAPI serves the recorded Web API answers of routes ("/chat.startStream":
// file under webapi/), each with HTTP 200 or, for ratelimited.429.json, 429
// and Retry-After: 2 as in its source test, to an events-mode connector.
func corpusAPI(t *testing.T, routes map[string]string) *Connector {
	t.Helper()
	answers := map[string][]byte{}
	for path, file := range routes {
		b, err := os.ReadFile(filepath.Join(corpusDir, "webapi", file))
		if err != nil {
			t.Fatal(err)
		}
		answers[path] = b
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if routes[r.URL.Path] == "ratelimited.429.json" {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Options{Mode: ModeEvents, BotToken: "xoxb-corpus", SigningSecret: fuzzSecret,
		APIURL: srv.URL + "/", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCorpusStreamAnswers: python-slack-sdk's recorded answer of the stream
// methods carries the ts the live message is then known by; opening,
// appending to and closing it succeed on it.
func TestCorpusStreamAnswers(t *testing.T) {
	c := corpusAPI(t, map[string]string{"/chat.startStream": "chat.stream.ok.json",
		"/chat.appendStream": "chat.stream.ok.json", "/chat.stopStream": "chat.stream.ok.json"})
	thread := chat.ThreadRef{Surface: chat.Slack, Channel: "CXXX", ID: "1234567890.123456"}
	ref, err := c.OpenStream(t.Context(), thread, chat.Message{Text: "…"})
	if err != nil || ref.ID != "123.123" || ref.Channel != "CXXX" {
		t.Fatalf("open: %+v, %v; want the recorded ts 123.123", ref, err)
	}
	if err := c.AppendStream(t.Context(), ref, chat.StreamUpdate{Delta: "hello", Text: "hello"}); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := c.CloseStream(t.Context(), ref, chat.Message{Text: "hello"}); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestCorpusUpdateAnswers: the recorded rate limit and missing_scope answers
// through the chat.update path (Update) are what they are on
// chat.postMessage: a *chat.RetryAfterError of the recorded Retry-After, and
// a retried error.
func TestCorpusUpdateAnswers(t *testing.T) {
	ref := chat.MessageRef{Surface: chat.Slack, Channel: "CXXX", ID: "1234567890.123456"}
	err := corpusAPI(t, map[string]string{"/chat.update": "ratelimited.429.json"}).Update(t.Context(), ref, chat.Message{Text: "x"})
	var ra *chat.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 2*time.Second {
		t.Fatalf("ratelimited: %v; want a *chat.RetryAfterError after 2s", err)
	}
	err = corpusAPI(t, map[string]string{"/chat.update": "missing_scope.json"}).Update(t.Context(), ref, chat.Message{Text: "x"})
	var se slackgo.SlackErrorResponse
	if !errors.As(err, &se) || se.Err != "missing_scope" || errors.Is(err, chat.ErrPermanent) {
		t.Fatalf("missing_scope: %v; want missing_scope, retried", err)
	}
}
