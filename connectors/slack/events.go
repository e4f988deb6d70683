package slack

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/roombridge/roombridge/chat"
)

// MaxBody bounds a webhook body; larger requests get 413 before any
// parsing. Slack's payloads are a few KiB.
const MaxBody = 1 << 20

// Webhook paths (mux patterns) of events mode.
const (
	EventsPattern        = "POST /slack/events"
	InteractivityPattern = "POST /slack/interactivity"
)

// Routes returns the Events API and interactivity webhooks (events mode
// only; nil in socket mode, where there is nothing to serve). Each request is
// refused before any parsing unless it is at most MaxBody (else 413) and
// signed with the signing secret within Slack's 5-minute window (else 401);
// a signed body that is not a Slack payload gets 400. A valid event is queued
// for h and answered 200 once the core has handled (stored) it. When
// Options.AckBudget since the request came runs out first (Slack wants its
// answer within 3 s) an event is answered 503, its handling going on, and
// Slack delivers it again (the core dedupes it); a click, which Slack does
// not send again, is answered 200 then. While the connector does not run here
// (before Run, or on an HA follower, which serves the webhooks but not the
// leader's work) or its queue is full, events get 503 and Slack delivers them
// again.
//
// Refusals are logged, and reported to h as chat.Refused events, which the
// core audits at a bounded rate (an audit record per forged request would
// let anyone who can reach the port fill the store).
func (c *Connector) Routes(h chat.Handler) map[string]http.Handler {
	if c.opts.Mode != ModeEvents {
		return nil
	}
	return map[string]http.Handler{
		EventsPattern:        http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serveEvents(w, r, h) }),
		InteractivityPattern: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serveInteractivity(w, r, h) }),
	}
}

// verified reads and verifies a webhook body. On failure it has answered
// the request and returns false.
func (c *Connector) verified(w http.ResponseWriter, r *http.Request, h chat.Handler) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			c.refuse(w, r, h, http.StatusRequestEntityTooLarge, "body over 1 MiB", nil)
		} else {
			c.refuse(w, r, h, http.StatusBadRequest, "reading the body", err)
		}
		return nil, false
	}
	sv, err := slackgo.NewSecretsVerifier(r.Header, c.opts.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		c.refuse(w, r, h, http.StatusUnauthorized, "signature check failed", err)
		return nil, false
	}
	return body, true
}

// refuse answers a webhook with status, logs why, and reports it to the
// core (which audits refusals at a bounded rate).
func (c *Connector) refuse(w http.ResponseWriter, r *http.Request, h chat.Handler, status int, why string, err error) {
	c.log.WarnContext(r.Context(), "webhook refused", "path", r.URL.Path, "status", status, "reason", why,
		"error", err, "remote", r.RemoteAddr, "retry_num", r.Header.Get("X-Slack-Retry-Num"))
	http.Error(w, http.StatusText(status), status)
	h.Handle(r.Context(), chat.RefusedEvent(chat.Slack, status, why))
}

func (c *Connector) serveEvents(w http.ResponseWriter, r *http.Request, h chat.Handler) {
	arrived := time.Now()
	body, ok := c.verified(w, r, h)
	if !ok {
		return
	}
	var outer struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &outer); err != nil || outer.Type == "" {
		c.refuse(w, r, h, http.StatusBadRequest, "not an Events API payload", err)
		return
	}
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		// A well-formed envelope whose inner event slack-go does not know:
		// acknowledge it, or Slack retries it and counts the failures.
		c.log.DebugContext(r.Context(), "unparsed event acknowledged", "type", outer.Type, "error", err)
		w.WriteHeader(http.StatusOK)
		return
	}
	switch ev.Type {
	case slackevents.URLVerification:
		v, ok := ev.Data.(*slackevents.EventsAPIURLVerificationEvent)
		if !ok {
			c.refuse(w, r, h, http.StatusBadRequest, "url_verification without a challenge", nil)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, v.Challenge)
		return
	case slackevents.AppRateLimited:
		c.log.WarnContext(r.Context(), "Slack is dropping events: app rate limited (30,000 events per hour)")
	case slackevents.CallbackEvent:
		if cev, ok := c.fromEventsAPI(ev); ok && !c.take(w, r, h, arrived, cev) {
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (c *Connector) serveInteractivity(w http.ResponseWriter, r *http.Request, h chat.Handler) {
	arrived := time.Now()
	body, ok := c.verified(w, r, h)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ic, err := slackgo.InteractionCallbackParse(r)
	if err != nil {
		c.refuse(w, r, h, http.StatusBadRequest, "not an interaction payload", err)
		return
	}
	if evs := fromInteraction(ic); len(evs) > 0 && !c.take(w, r, h, arrived, evs...) {
		return
	}
	w.WriteHeader(http.StatusOK)
}

// take queues the events of a webhook request that arrived at arrived and
// waits until the core has handled them or the ack budget has run out. If
// they cannot be queued, or are not to be acknowledged (delivery.wait: the
// core failed on our side, or the budget ran out on an event), it answers
// 503 (Slack delivers them again; the core dedupes those it stored) and
// returns false.
func (c *Connector) take(w http.ResponseWriter, r *http.Request, h chat.Handler, arrived time.Time, evs ...chat.Event) bool {
	d, ok := c.inbound.submit(h, arrived, evs...)
	if !ok {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return false
	}
	if !d.wait(r.Context()) {
		http.Error(w, "the bridge has not stored the event; deliver it again", http.StatusServiceUnavailable)
		return false
	}
	return true
}
