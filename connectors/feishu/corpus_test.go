package feishu

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
