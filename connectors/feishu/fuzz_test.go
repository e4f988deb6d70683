package feishu

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

// Fuzz targets of the HTTP callback (POST /feishu/events), through the real
// handler of Routes with the connector running: event bodies (schema 2.0 and
// 1.0) and card callbacks, plain (checked by the verification token in the
// body) and encrypted ({"encrypt": base64}, signed with the encrypt key).
// FuzzCallback and FuzzCallbackEncrypted get past the checks (the seeds carry
// the token; the encrypted target encrypts and signs what the fuzzer makes),
// so the fuzzer reaches the SDK's decryption and event decoding and our
// translation; FuzzCallbackSignature fuzzes the signature headers and the
// raw body. Seeds: testdata/fuzz/<target>/, from feishutest's events and
// hand-written edge cases, including the garbage padding that makes the
// SDK's EventDecrypt panic, and the recorded callbacks of the corpus
// (testdata/platforms/feishu, seedCorpus; their tokens are not the fuzzed
// connector's, so they exercise the refusals).

const (
	fuzzToken = "fuzz-verification-token"
	fuzzKey   = "fuzz-encrypt-key"
	fuzzBot   = "ou_fuzzbot"
)

// fuzzRecorder is the core as the fuzz targets see it: it records events.
type fuzzRecorder struct {
	mu     sync.Mutex
	events []chat.Event
}

func (r *fuzzRecorder) Handle(_ context.Context, ev chat.Event) chat.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	return chat.Response{}
}

// take returns the events recorded since the last take, checking the
// refusal reports among them: a request answered 4xx is reported to the core
// once, as a chat.Refused event of an unverified Feishu sender, and nothing
// else of it reaches the core; other answers report no refusal. It returns
// the other events.
func (r *fuzzRecorder) take(t *testing.T, status int) []chat.Event {
	t.Helper()
	r.mu.Lock()
	evs := r.events
	r.events = nil
	r.mu.Unlock()
	var out []chat.Event
	refused := 0
	for _, ev := range evs {
		if ev.Kind != chat.Refused {
			out = append(out, ev)
			continue
		}
		refused++
		if ev.Surface != chat.Feishu || ev.User != "feishu:unverified" || !strings.HasPrefix(ev.Text, "HTTP "+strconv.Itoa(status)+": ") {
			t.Fatalf("answered %d, reported refusal %+v", status, ev)
		}
	}
	if want := status >= 400 && status < 500; (refused == 1) != want || refused > 1 {
		t.Fatalf("answered %d, reported %d refusals", status, refused)
	}
	return out
}

// fuzzConnector runs a callback-mode connector (encrypted with fuzzKey when
// encrypted) until the fuzz test ends, and returns its callback handler.
func fuzzConnector(f *testing.F, encrypted bool) (http.Handler, *fuzzRecorder) {
	f.Helper()
	key := ""
	if encrypted {
		key = fuzzKey
	}
	return callbackConnector(f, fuzzToken, key)
}

// callbackConnector runs a callback-mode connector with verification token
// token and encrypt key key ("": plain) until the test ends, and returns its
// callback handler and the recorder of what reaches the core. The bot's
// open_id is known (no bot/v3/info call) and the ack budget is long, so
// every event has reached the recorder when the handler returns.
func callbackConnector(tb testing.TB, token, key string) (http.Handler, *fuzzRecorder) {
	tb.Helper()
	c, err := New(Options{Mode: ModeCallback, AppID: "cli_fuzz", AppSecret: "fuzz-secret", VerificationToken: token,
		EncryptKey: key, BaseURL: "http://127.0.0.1:1", BotOpenID: fuzzBot, AckBudget: time.Minute,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	rec := &fuzzRecorder{}
	h := c.Routes(rec)["POST "+EventsPath]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, rec)
	}()
	tb.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); c.running.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatal("the connector did not start")
		}
	}
	return h, rec
}

// serve posts body with the headers of hd; it returns the status and, for a
// refusal, its reason.
func serve(h http.Handler, body []byte, hd http.Header) (int, string) {
	req := httptest.NewRequest(http.MethodPost, EventsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	for k, v := range hd {
		req.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var answer struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &answer)
	return w.Code, answer.Error
}

// signed returns the headers Feishu signs body with at time at.
func signed(f testing.TB, body []byte, at time.Time) http.Header {
	req, err := feishutest.SignedRequest(context.Background(), "http://bridge"+EventsPath, fuzzKey, body, at)
	if err != nil {
		f.Fatal(err)
	}
	return req.Header
}

// checkOutcome holds for every authentic request: the answer is not a server
// error (which makes Feishu push it again, for nothing), a refused request
// reaches no handler, and every event that does is one the core can take.
func checkOutcome(t *testing.T, status int, evs []chat.Event) {
	t.Helper()
	if status >= 500 {
		t.Fatalf("authentic body answered %d", status)
	}
	if status != http.StatusOK && len(evs) > 0 {
		t.Fatalf("answered %d but %d events reached the core: %+v", status, len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Surface != chat.Feishu {
			t.Fatalf("event of surface %q", ev.Surface)
		}
		if user, ok := strings.CutPrefix(ev.User, chat.Feishu+":"); !ok || user == "" {
			t.Fatalf("event user %q: want feishu:<open_id>", ev.User)
		}
		switch ev.Kind {
		case chat.Ask:
			if ev.Thread != nil || ev.Click != nil || ev.Channel == "" {
				t.Fatalf("ask: %+v", ev)
			}
		case chat.Reply:
			if ev.Thread == nil || ev.Thread.ID == "" || ev.Thread.Surface != chat.Feishu || ev.Click != nil {
				t.Fatalf("reply without its thread: %+v", ev)
			}
		case chat.Click:
			if ev.Click == nil || ev.Click.BlockID == "" || ev.Click.ActionID == "" {
				t.Fatalf("click without its action: %+v", ev)
			}
		default:
			t.Fatalf("event of kind %q", ev.Kind)
		}
	}
}

// FuzzCallback posts body as a plain callback (no encrypt key: the
// verification token in the body is the check).
func FuzzCallback(f *testing.F) {
	h, rec := fuzzConnector(f, false)
	seedCorpus(f, corpusCallbacks...)
	f.Fuzz(func(t *testing.T, body []byte) {
		status, _ := serve(h, body, nil)
		checkOutcome(t, status, rec.take(t, status))
	})
}

// FuzzCallbackEncrypted encrypts plaintext with the encrypt key, signs the
// body and posts it: the fuzzer works on the event JSON, behind the
// encryption.
func FuzzCallbackEncrypted(f *testing.F) {
	h, rec := fuzzConnector(f, true)
	seedCorpus(f, corpusCallbacks...)
	f.Fuzz(func(t *testing.T, plaintext []byte) {
		body, err := feishutest.Encrypt(fuzzKey, plaintext)
		if err != nil {
			t.Fatal(err)
		}
		status, _ := serve(h, []byte(body), signed(t, []byte(body), time.Now()))
		checkOutcome(t, status, rec.take(t, status))
	})
}

// FuzzCallbackSignature posts body to the encrypted callback with fuzzed
// headers: timestamp ("" is offset seconds from now, "none" none), nonce and
// signature as given, or, when signature is "sign", the right signature of
// body for a timestamp offset seconds from now. Only the right signature within MaxSkew gets past the check; an
// unsigned body is answered only if it is the URL challenge; nothing refused
// reaches the core.
func FuzzCallbackSignature(f *testing.F) {
	h, rec := fuzzConnector(f, true)
	f.Fuzz(func(t *testing.T, body []byte, timestamp, nonce, signature string, offset int64) {
		offset %= 1 << 40 // stays a valid time
		hd := http.Header{}
		sign := signature == "sign"
		at := strconv.FormatInt(time.Now().Unix()+offset, 10)
		if sign {
			hd.Set(feishutest.HeaderTimestamp, at)
			hd.Set(feishutest.HeaderNonce, nonce)
			hd.Set(feishutest.HeaderSignature, feishutest.Sign(at, nonce, fuzzKey, body))
		} else {
			switch timestamp {
			case "":
				timestamp = at
			case "none":
				timestamp = ""
			}
			for k, v := range map[string]string{feishutest.HeaderTimestamp: timestamp, feishutest.HeaderNonce: nonce,
				feishutest.HeaderSignature: signature} {
				if v != "" {
					hd.Set(k, v)
				}
			}
		}
		status, reason := serve(h, body, hd)
		evs := rec.take(t, status)
		fresh := offset > -299 && offset < 299
		stale := offset < -301 || offset > 301
		switch {
		case !sign || stale:
			unsignedChallenge := !sign && signature == "" && status == http.StatusOK
			if len(evs) > 0 || (status != http.StatusUnauthorized && !unsignedChallenge) {
				t.Fatalf("signature %q, offset %ds: %d and %d events, want 401 and none", signature, offset, status, len(evs))
			}
		case fresh:
			// A body that decrypts may still carry the wrong token.
			if status == http.StatusUnauthorized && reason != "wrong verification token" {
				t.Fatalf("right signature, %ds off: refused: %s", offset, reason)
			}
			checkOutcome(t, status, evs)
		}
	})
}

// corpusCallbacks are the callback bodies of the corpus the fuzz targets
// start from (the templates as recorded, and filled as their source tests
// fill them: seedCorpus).
var corpusCallbacks = []string{"events/url_verification_v2.json", "cards/old_schema_url_verification.json",
	"events/im.message.receive_v1.doc_sample.json", "events/im.message.receive_v1.group.tmpl.json",
	"cards/card.action.trigger.v2.tmpl.json"}

// seedCorpus adds the corpus files named to f's seeds, and the templates
// filled.
func seedCorpus(f *testing.F, names ...string) {
	for _, name := range names {
		f.Add(corpusFile(f, name))
	}
	f.Add(groupMessage(f))
	f.Add(cardAction(f))
}
