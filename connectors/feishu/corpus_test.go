package feishu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/roombridge/roombridge/chat"
)

// The corpus of recorded Feishu payloads (testdata/platforms/feishu, see its
// README) through the connector's own callback handler (POST /feishu/events,
// with the verification token and encrypt key of the SDK test each payload
// comes from), and the recorded Open API answers served to the real SDK
// client through the connector's own send path.

var corpusDir = filepath.Join("..", "..", "testdata", "platforms", "feishu")

func corpusFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(corpusDir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCorpusCallbacks posts every inbound corpus file as Feishu would, with
// its source test's token (and key), and checks the answer: each recorded
// callback is a url_verification, answered with its challenge and nothing
// for the core; with the wrong token it is refused (401).
func TestCorpusCallbacks(t *testing.T) {
	for _, tc := range []struct {
		file, token, key, challenge string
	}{
		{"events/url_verification_v2.json", "v", "", "1212"},
		{"events/url_verification_v2.encrypted.txt", "v", "1212121212", "1212"},
		{"cards/old_schema_url_verification.json", "12", "", "121212"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body := corpusFile(t, tc.file)
			if tc.key != "" {
				b, err := json.Marshal(map[string]string{"encrypt": strings.TrimSpace(string(body))})
				if err != nil {
					t.Fatal(err)
				}
				body = b
			}
			h, rec := callbackConnector(t, tc.token, tc.key)
			req := httptest.NewRequest(http.MethodPost, EventsPath, strings.NewReader(string(body)))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			var answer struct {
				Challenge string `json:"challenge"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &answer)
			if w.Code != http.StatusOK || answer.Challenge != tc.challenge {
				t.Fatalf("answered %d %s, want 200 and challenge %q", w.Code, w.Body, tc.challenge)
			}
			if evs := rec.take(t, w.Code); len(evs) > 0 {
				t.Fatalf("a url_verification reached the core: %+v", evs)
			}

			h, rec = callbackConnector(t, "not-"+tc.token, tc.key)
			status, _ := serve(h, body, nil)
			if status != http.StatusUnauthorized {
				t.Fatalf("with another verification token: answered %d, want 401", status)
			}
			if evs := rec.take(t, status); len(evs) > 0 {
				t.Fatalf("a refused callback reached the core: %+v", evs)
			}
		})
	}
}

// TestCorpusOpenAPIAnswers serves the recorded tenant token and message
// create answers (and the recorded error) to the SDK client through
// StartThread.
func TestCorpusOpenAPIAnswers(t *testing.T) {
	for _, tc := range []struct {
		file  string
		check func(t *testing.T, id string, err error)
	}{
		{"openapi/im.v1.messages.create.ok.json", func(t *testing.T, id string, err error) {
			if err != nil || id != "om_123456" {
				t.Fatalf("id %q, error %v; want the recorded message_id", id, err)
			}
		}},
		// An error code the connector does not know is Feishu refusing the
		// request: dropped, not retried forever.
		{"openapi/error.999999.json", func(t *testing.T, _ string, err error) {
			if !errors.Is(err, chat.ErrPermanent) || !strings.Contains(err.Error(), "code 999999: some random error") {
				t.Fatalf("error %v; want permanent, naming code 999999", err)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			token := corpusFile(t, "openapi/auth.v3.tenant_access_token.ok.json")
			answer := corpusFile(t, tc.file)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				switch r.URL.Path {
				case "/open-apis/auth/v3/tenant_access_token/internal":
					_, _ = w.Write(token)
				case "/open-apis/im/v1/messages":
					_, _ = w.Write(answer)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			c, err := New(Options{Mode: ModeCallback, AppID: "cli_corpus", AppSecret: "corpus-secret",
				VerificationToken: "v", BaseURL: srv.URL, BotOpenID: fuzzBot, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			_, m, err := c.StartThread(t.Context(), "oc_corpus", chat.Message{Text: "hello"})
			tc.check(t, m.ID, err)
		})
	}
}

// corpusFilled returns a corpus template (a format string of an SDK test,
// recorded as it is) filled with the arguments its source test calls it
// with (see the README).
func corpusFilled(t testing.TB, name string, args ...any) []byte {
	t.Helper()
	return fmt.Appendf(nil, string(corpusFile(t, name)), args...)
}

// groupMessage and cardAction are the recorded templates filled as their
// source tests fill them (message_dedup_test.go line 81; card_action_test.go
// line 73).
func groupMessage(t testing.TB) []byte {
	return corpusFilled(t, "events/im.message.receive_v1.group.tmpl.json", "evt_1", time.Now().UnixMilli(), "om_same_123")
}

func cardAction(t testing.TB) []byte {
	return corpusFilled(t, "cards/card.action.trigger.v2.tmpl.json", "evt_card_1", "om_card_1", "oc_card_1")
}

// TestCorpusMessageCallbacks posts the recorded im.message.receive_v1 and
// card.action.trigger (card 2.0) callbacks. The documentation's sample (a
// reply in a topic of a group, mentioning a user who is not the bot) becomes
// a chat.Reply in the topic its root_id names, the mention written @name.
// The SDK tests' payloads carry no verification token (their dispatcher has
// none): a callback connector refuses them, and says why.
func TestCorpusMessageCallbacks(t *testing.T) {
	h, rec := callbackConnector(t, "rvaYgkND1GOiu5MM0E1rncYC6PLtF7JV", "")
	status, reason := serve(h, corpusFile(t, "events/im.message.receive_v1.doc_sample.json"), nil)
	evs := rec.take(t, status)
	want := []chat.Event{{Kind: chat.Reply, Surface: chat.Feishu, ID: "5e3702a84e847582be8db7fb73283c02",
		Channel: "oc_5ce6d572455d361153b7xx51da133945", User: "feishu:ou_84aad35d084aa403a838cf73ee18467", Text: "@Tom hello", Message: "om_5ce6d572455d361153b7cb51da133945",
		Thread: &chat.ThreadRef{Surface: chat.Feishu, Channel: "oc_5ce6d572455d361153b7xx51da133945", ID: "om_5ce6d572455d361153b7cb5xxfsdfsdfdsf"}}}
	if status != http.StatusOK || !reflect.DeepEqual(evs, want) {
		t.Fatalf("documentation sample: %d %q, events %+v; want 200 and %+v", status, reason, evs, want)
	}
	for name, body := range map[string][]byte{"group message": groupMessage(t), "card action": cardAction(t)} {
		status, reason := serve(h, body, nil)
		if evs := rec.take(t, status); status != http.StatusUnauthorized || reason != "wrong verification token" || len(evs) > 0 {
			t.Fatalf("%s without a token: %d %q, events %+v; want 401, wrong verification token", name, status, reason, evs)
		}
	}
}

// TestCorpusWSFrames: the recorded long-connection frames are the bytes
// the SDK's own tests put on the wire (client_dispatch_test.go lines 74-82,
// client_lifecycle_test.go lines 668-674), built here as they build them.
func TestCorpusWSFrames(t *testing.T) {
	hs := larkws.Headers{}
	hs.Add(larkws.HeaderType, string(larkws.MessageTypeEvent))
	hs.Add(larkws.HeaderMessageID, "message-1")
	hs.Add(larkws.HeaderTraceID, "trace-1")
	event := &larkws.Frame{Method: int32(larkws.FrameTypeData), Headers: hs, Payload: []byte(`{"header":{"event_type":"test.event"}}`)}
	conf, err := json.Marshal(&larkws.ClientConfig{PingInterval: 7})
	if err != nil {
		t.Fatal(err)
	}
	ph := larkws.Headers{}
	ph.Add(larkws.HeaderType, string(larkws.MessageTypePong))
	pong := &larkws.Frame{Method: int32(larkws.FrameTypeControl), Headers: ph, Payload: conf}
	for name, f := range map[string]*larkws.Frame{"ws/event_frame.pb": event, "ws/pong_frame.pb": pong} {
		b, err := f.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, corpusFile(t, name)) {
			t.Errorf("%s is not the frame its source test builds", name)
		}
	}
}

// TestCorpusEveryCallbackUsed: every inbound file of the corpus (events,
// cards) seeds the fuzz targets (corpusCallbacks; the encrypted one is
// posted by TestCorpusCallbacks), so none is left out of the tests.
func TestCorpusEveryCallbackUsed(t *testing.T) {
	used := map[string]bool{"events/url_verification_v2.encrypted.txt": true}
	for _, name := range corpusCallbacks {
		used[name] = true
	}
	for _, dir := range []string{"events", "cards"} {
		paths, err := filepath.Glob(filepath.Join(corpusDir, dir, "*"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no corpus files in %s: %v", dir, err)
		}
		for _, p := range paths {
			if name := dir + "/" + filepath.Base(p); !used[name] {
				t.Errorf("corpus file %s is used by no test", name)
			}
		}
	}
}
