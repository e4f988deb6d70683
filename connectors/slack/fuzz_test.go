package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// Fuzz targets of the events-mode webhooks, through the real handlers of
// Routes and slack-go's verifier. FuzzEvents and FuzzInteractivity sign
// every body correctly, so the fuzzer gets past the signature check into the
// JSON (and form) decoding; FuzzSignature fuzzes the signature headers
// themselves. Seeds: testdata/fuzz/<target>/, made from slacktest's payloads
// (the bodies the other tests send) and hand-written edge cases, and every
// inbound payload of the corpus of real ones (testdata/platforms/slack,
// seedCorpus), and the payloads of its Socket Mode frames
// (seedSocketPayloads).
//
// Socket Mode has no target here: slack-go reads its frames and envelopes;
// what it hands over goes through fromEventsAPI and fromInteraction, which
// the two webhook targets reach.

const (
	fuzzSecret = "fuzz-signing-secret"
	// fuzzQueue bounds the inbound queue of the fuzzed connector.
	fuzzQueue = 64
)

// refusals is the chat.Handler given to Routes. The fuzzed connector runs no
// workers (each fuzz call takes what its request queued off the queue
// itself), so the only calls are the webhooks' reports of refusals, made
// before they return; it counts them.
type refusals struct {
	mu  sync.Mutex
	evs []chat.Event
}

func (r *refusals) Handle(_ context.Context, ev chat.Event) chat.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return chat.Response{}
}

// check holds for every request: one answered 4xx is reported once, as a
// chat.Refused event of an unverified Slack sender; others report nothing.
func (r *refusals) check(t *testing.T, status int) {
	t.Helper()
	r.mu.Lock()
	evs := r.evs
	r.evs = nil
	r.mu.Unlock()
	want := 0
	if status >= 400 && status < 500 {
		want = 1
	}
	if len(evs) != want {
		t.Fatalf("answered %d, reported %d refusals: %+v", status, len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Kind != chat.Refused || ev.Surface != chat.Slack || ev.User != "slack:unverified" ||
			!strings.HasPrefix(ev.Text, "HTTP "+strconv.Itoa(status)+": ") {
			t.Fatalf("answered %d, reported %+v", status, ev)
		}
	}
}

// fuzzConnector returns an events-mode connector whose pool accepts events
// (as while Run runs) but hands them to no worker, its webhook routes and
// the handler the refusals are reported to.
func fuzzConnector(t testing.TB) (*Connector, map[string]http.Handler, *refusals) {
	t.Helper()
	c, err := New(Options{Mode: ModeEvents, BotToken: "xoxb-fuzz", SigningSecret: fuzzSecret,
		Log: slog.New(slog.DiscardHandler), Workers: 1, Queue: fuzzQueue})
	if err != nil {
		t.Fatal(err)
	}
	c.inbound.mu.Lock()
	c.inbound.running = true
	c.inbound.mu.Unlock()
	rs := &refusals{}
	return c, c.Routes(rs), rs
}

// drain returns the events queued since the last drain.
func drain(p *pool) []chat.Event {
	var out []chat.Event
	quit := make(chan struct{})
	close(quit) // run what is queued, then return
	p.queue.Run(1, quit, func(j job) { out = append(out, j.ev) })
	return out
}

// post serves one webhook request; sign (if not nil) sets its headers.
func post(h http.Handler, path, contentType string, body []byte, sign func(*http.Request)) int {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if sign != nil {
		sign(req)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// checkOutcome holds for every verified request: the answer is not a server
// error (503 only when the request filled the queue: Slack redelivers it);
// a refused request queues nothing; every queued event is one the core can
// take (respond slices the "slack:" off User; the pool and the router
// dereference Thread and Click by Kind).
func checkOutcome(t *testing.T, status int, evs []chat.Event) {
	t.Helper()
	busy := status == http.StatusServiceUnavailable && len(evs) == fuzzQueue
	if status >= 500 && !busy {
		t.Fatalf("verified body answered %d", status)
	}
	if status != http.StatusOK && !busy && len(evs) > 0 {
		t.Fatalf("answered %d but queued %d events: %+v", status, len(evs), evs)
	}
	for _, ev := range evs {
		checkEvent(t, ev)
	}
}

func checkEvent(t *testing.T, ev chat.Event) {
	t.Helper()
	if ev.Surface != chat.Slack {
		t.Fatalf("event of surface %q", ev.Surface)
	}
	if user, ok := strings.CutPrefix(ev.User, chat.Slack+":"); (!ok || user == "") && (ev.Kind != chat.Delete || ev.User != "") {
		t.Fatalf("event user %q: want slack:<id> (or none: a deletion)", ev.User)
	}
	switch ev.Kind {
	case chat.Edit, chat.Delete:
		if ev.Message == "" || ev.Channel == "" || ev.Thread != nil || ev.Click != nil {
			t.Fatalf("%s without its message: %+v", ev.Kind, ev)
		}
	case chat.Ask:
		if ev.Thread != nil || ev.Click != nil {
			t.Fatalf("ask with a thread or click: %+v", ev)
		}
	case chat.Reply:
		if ev.Thread == nil || ev.Thread.ID == "" || ev.Thread.Surface != chat.Slack || ev.Click != nil {
			t.Fatalf("reply without its thread: %+v", ev)
		}
	case chat.Click:
		if ev.Click == nil || ev.Click.Message.Surface != chat.Slack {
			t.Fatalf("click without its action: %+v", ev)
		}
		if ev.Thread != nil && ev.Thread.ID == "" {
			t.Fatalf("click in a thread without an ID: %+v", ev)
		}
	default:
		t.Fatalf("event of kind %q", ev.Kind)
	}
}

func signNow(body []byte) func(*http.Request) {
	return func(r *http.Request) { slacktest.SignRequest(r, body, fuzzSecret, time.Now()) }
}

// FuzzEvents posts body, correctly signed, to the Events API webhook.
func FuzzEvents(f *testing.F) {
	c, routes, rs := fuzzConnector(f)
	h := routes[EventsPattern]
	seedCorpus(f, "events", "events/inner")
	seedSocketPayloads(f, "events_api")
	f.Fuzz(func(t *testing.T, body []byte) {
		status := post(h, "/slack/events", "application/json", body, signNow(body))
		rs.check(t, status)
		checkOutcome(t, status, drain(c.inbound))
	})
}

// FuzzInteractivity posts body, correctly signed, to the interactivity
// webhook as a form (Slack sends payload=<JSON>).
func FuzzInteractivity(f *testing.F) {
	c, routes, rs := fuzzConnector(f)
	h := routes[InteractivityPattern]
	seedCorpus(f, "interactions")
	seedSocketPayloads(f, "interactive")
	f.Fuzz(func(t *testing.T, body []byte) {
		status := post(h, "/slack/interactivity", "application/x-www-form-urlencoded", body, signNow(body))
		rs.check(t, status)
		checkOutcome(t, status, drain(c.inbound))
	})
}

// FuzzSignature posts body to either webhook with fuzzed signature headers:
// timestamp ("" is offset seconds from now, "none" none) and signature as
// given, or, when signature is "sign", the right signature of body for a
// timestamp offset seconds from now. Only the right signature within Slack's
// five minutes gets past the check, and a refused request queues nothing.
func FuzzSignature(f *testing.F) {
	c, routes, rs := fuzzConnector(f)
	f.Fuzz(func(t *testing.T, interactive bool, body []byte, timestamp, signature string, offset int64) {
		path, ct, h := "/slack/events", "application/json", routes[EventsPattern]
		if interactive {
			path, ct, h = "/slack/interactivity", "application/x-www-form-urlencoded", routes[InteractivityPattern]
		}
		signed := signature == "sign"
		offset %= 1 << 40 // stays a valid time
		status := post(h, path, ct, body, func(r *http.Request) {
			at := time.Now().Add(time.Duration(offset) * time.Second)
			if signed {
				slacktest.SignRequest(r, body, fuzzSecret, at)
				return
			}
			switch timestamp {
			case "":
				r.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(at.Unix(), 10))
			case "none":
			default:
				r.Header.Set("X-Slack-Request-Timestamp", timestamp)
			}
			if signature != "" {
				r.Header.Set("X-Slack-Signature", signature)
			}
		})
		rs.check(t, status)
		evs := drain(c.inbound)
		// A second either side of the window edge may go either way.
		fresh := offset > -299 && offset < 299
		stale := offset < -301 || offset > 301
		switch {
		case !signed || stale:
			if status != http.StatusUnauthorized || len(evs) > 0 {
				t.Fatalf("signed %v, offset %ds (timestamp %q, signature %q): %d and %d events, want 401 and none",
					signed, offset, timestamp, signature, status, len(evs))
			}
		case fresh:
			if status == http.StatusUnauthorized {
				t.Fatalf("right signature %ds off refused", offset)
			}
			checkOutcome(t, status, evs)
		}
	})
}

// seedCorpus adds the bodies Slack would send for the corpus files under
// dirs (corpusBody) to f's seeds.
func seedCorpus(f *testing.F, dirs ...string) {
	for _, name := range corpusFiles(f, dirs...) {
		_, _, body := corpusBody(f, name)
		f.Add(body)
	}
}

// seedSocketPayloads adds the payloads of the recorded Socket Mode frames of
// type typ (testdata/platforms/slack/socket) to f's seeds, as the webhook of
// the same kind receives them: an event_callback body, or an interaction
// form-encoded (payload=<JSON>).
func seedSocketPayloads(f *testing.F, typ string) {
	paths, err := filepath.Glob(filepath.Join(corpusDir, "socket", "*.json"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no Socket Mode frames in the corpus: %v", err)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var frame struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(raw, &frame); err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		switch {
		case frame.Type != typ:
		case typ == "interactive":
			f.Add([]byte(url.Values{"payload": {string(frame.Payload)}}.Encode()))
		default:
			f.Add([]byte(frame.Payload))
		}
	}
}
