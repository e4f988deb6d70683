package feishu

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"

	"github.com/roombridge/roombridge/chat"
)

// EventsPath is where Feishu posts events and card callbacks in callback mode.
const EventsPath = "/feishu/events"

// Callback limits.
const (
	// MaxBody is the largest callback body accepted (Feishu's are a few KB).
	MaxBody = 1 << 20
	// MaxSkew is how far a callback's X-Lark-Request-Timestamp may be from
	// now; older (or future) requests are refused as replays. The SDK does
	// not check it.
	MaxSkew = 5 * time.Minute
)

// Routes implements the daemon's webhook hook: POST /feishu/events, mounted
// in callback mode, and in ws mode too when a verification token or encrypt
// key is configured, so card callbacks can be set to HTTP (the ws client of
// SDK v3.12 drops "card" frames; see the README of this package).
func (c *Connector) Routes(h chat.Handler) map[string]http.Handler {
	if c.opts.Mode != ModeCallback && c.opts.VerificationToken == "" && c.opts.EncryptKey == "" {
		return nil
	}
	c.handler.Store(&h)
	return map[string]http.Handler{"POST " + EventsPath: http.HandlerFunc(c.serveCallback)}
}

// refusal is why a callback is not accepted, and the HTTP status that says so.
type refusal struct {
	status int
	reason string
}

// serveCallback verifies a callback (size, signature, timestamp, encryption,
// verification token), answers url_verification, and hands events to the
// dispatcher shared with the long connection. Each refusal is a clear status
// and a log line, and nothing reaches the core. While Run does not run here
// (before it starts, or on an HA follower, which serves the webhooks but not
// the leader's work) events get 503 and Feishu delivers them again.
//
// Refusals are logged, and audited by the core at a bounded rate (an audit
// record per forged request would let anyone fill the store).
func (c *Connector) serveCallback(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			c.refuse(w, r, refusal{http.StatusRequestEntityTooLarge, "body over 1 MiB"})
			return
		}
		c.refuse(w, r, refusal{http.StatusBadRequest, "cannot read body: " + err.Error()})
		return
	}
	plain, ref := c.open(r.Header, body)
	if ref != nil {
		c.refuse(w, r, *ref)
		return
	}
	var probe struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
		Token     string `json:"token"`
		Header    *struct {
			Token     string `json:"token"`
			EventID   string `json:"event_id"`
			EventType string `json:"event_type"`
		} `json:"header"`
	}
	if err := json.Unmarshal(plain, &probe); err != nil {
		c.refuse(w, r, refusal{http.StatusBadRequest, "body is not a JSON event"})
		return
	}
	token := probe.Token
	if probe.Header != nil {
		token = probe.Header.Token
	}
	if want := c.opts.VerificationToken; want != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) != 1 {
		c.refuse(w, r, refusal{http.StatusUnauthorized, "wrong verification token"})
		return
	}
	if probe.Type == "url_verification" {
		writeJSON(w, http.StatusOK, map[string]string{"challenge": probe.Challenge})
		return
	}
	if c.running.Load() == 0 {
		c.refuse(w, r, refusal{http.StatusServiceUnavailable, "not receiving events here (not the leader, or not started)"})
		return
	}
	resp, err := c.disp.Do(r.Context(), plain)
	var notFound *dispatcher.NotFoundEventHandlerErr
	switch {
	case errors.As(err, &notFound):
		writeJSON(w, http.StatusOK, map[string]string{"msg": "ignored"})
	case err != nil && !errors.Is(err, errNoHandler) && !errors.Is(err, errUnsureMention) && !errors.Is(err, errNotStored):
		// The SDK could not decode the event (a field of the wrong type):
		// it would not decode better when Feishu pushed it again.
		c.refuse(w, r, refusal{http.StatusBadRequest, "event does not decode: " + err.Error()})
	case err != nil:
		// Feishu delivers the event again later.
		c.log.WarnContext(r.Context(), "feishu: callback not handled", "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	case resp != nil:
		writeJSON(w, http.StatusOK, resp)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"msg": "success"})
	}
}

// open checks the signature and timestamp and decrypts the body; it returns
// the plaintext event JSON or why it is refused. With an encrypt key, a
// request without a valid signature is refused before anything is
// decrypted; only the url_verification challenge may come unsigned.
func (c *Connector) open(h http.Header, body []byte) ([]byte, *refusal) {
	key := c.opts.EncryptKey
	sig := h.Get(larkevent.EventSignature)
	ts := h.Get(larkevent.EventRequestTimestamp)
	if key == "" {
		if ts != "" && !c.fresh(ts) {
			return nil, &refusal{http.StatusUnauthorized, "stale or invalid X-Lark-Request-Timestamp"}
		}
		return body, nil
	}
	if sig != "" {
		want := larkevent.Signature(ts, h.Get(larkevent.EventRequestNonce), key, string(body))
		if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
			return nil, &refusal{http.StatusUnauthorized, "bad X-Lark-Signature"}
		}
		if !c.fresh(ts) {
			return nil, &refusal{http.StatusUnauthorized, "stale or invalid X-Lark-Request-Timestamp"}
		}
	}
	unsigned := &refusal{http.StatusUnauthorized, "missing X-Lark-Signature"}
	var env struct {
		Encrypt string `json:"encrypt"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Encrypt == "" {
		if sig == "" {
			return nil, unsigned
		}
		return nil, &refusal{http.StatusBadRequest, "body is not an encrypted event"}
	}
	plain, err := decrypt(env.Encrypt, key)
	if err != nil || !json.Valid(plain) {
		if sig == "" {
			return nil, unsigned
		}
		return nil, &refusal{http.StatusBadRequest, "cannot decrypt body with the encrypt key"}
	}
	if sig == "" {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(plain, &t) != nil || t.Type != "url_verification" {
			return nil, unsigned
		}
	}
	return plain, nil
}

// fresh reports whether a Unix-seconds timestamp is within MaxSkew of now.
func (c *Connector) fresh(ts string) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := c.clock.Now().Sub(time.Unix(sec, 0))
	return d <= MaxSkew && d >= -MaxSkew
}

// refuse answers a callback with ref's status, logs why, and reports it to
// the core (which audits refusals at a bounded rate) unless it only says
// that events are not received here (503: not bad input).
func (c *Connector) refuse(w http.ResponseWriter, r *http.Request, ref refusal) {
	c.log.WarnContext(r.Context(), "feishu: callback refused", "status", ref.status, "reason", ref.reason, "remote", r.RemoteAddr)
	writeJSON(w, ref.status, map[string]string{"error": ref.reason})
	if h := c.handler.Load(); h != nil && ref.status != http.StatusServiceUnavailable {
		(*h).Handle(r.Context(), chat.RefusedEvent(chat.Feishu, ref.status, ref.reason))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decrypt is the SDK's EventDecrypt, which panics (slice bounds) on a body
// whose padding is garbage: that panic becomes an error, so an undecryptable
// body gets its 400 instead of a dropped connection.
func decrypt(encrypted, key string) (plain []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			plain, err = nil, fmt.Errorf("feishu: decrypt: %v", r)
		}
	}()
	return larkevent.EventDecrypt(encrypted, key)
}
