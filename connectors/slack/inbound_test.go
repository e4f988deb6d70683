package slack_test

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/rooms"
)

// requestsMade waits until n requests exist and the outbox is empty.
func (h *harness) requestsMade(n int) {
	h.t.Helper()
	h.waitStore("requests and their effects", func() bool {
		return len(h.requests()) >= n && h.outboxEmpty()
	})
	if got := len(h.requests()); got != n {
		h.t.Fatalf("%d requests, want %d", got, n)
	}
}

// The same event delivered three times makes one request: Events API retries
// (X-Slack-Retry-Num 1 and 2) and Socket Mode redeliveries (new envelope,
// same event_id) are deduplicated by event_id in the store.
func TestSameEventThreeTimesMakesOneRequest(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fast(setup{mode: mode}))
			raw := "<@" + slacktest.BotUserID + "> coder echo once"
			ts, err := h.fake.AddUserMessage(channel, member, raw, "")
			if err != nil {
				t.Fatal(err)
			}
			body := slacktest.AppMentionEvent("EvSAME", channel, member, raw, ts, "")
			if mode == slack.ModeEvents {
				for retry := range 3 {
					if resp := h.post("/slack/events", body, "application/json", time.Now(), retry); resp.StatusCode != http.StatusOK {
						t.Fatalf("delivery %d: %d", retry, resp.StatusCode)
					}
				}
			} else {
				env, err := h.fake.PushEventsAPI(h.ctx(), body)
				if err != nil {
					t.Fatal(err)
				}
				envs := []string{env}
				for range 2 {
					if env, err = h.fake.Redeliver(h.ctx(), env); err != nil {
						t.Fatal(err)
					}
					envs = append(envs, env)
				}
				for _, e := range envs {
					if _, err := h.fake.WaitAck(h.ctx(), e); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Each copy was acknowledged once the core had handled it (the
			// ack waits for the core; the copies of one event share a lane),
			// so a later mention's request comes after all of them.
			h.mention(member, "coder echo sentinel")
			h.requestsMade(2)
			rs := h.requests()
			if rs[0].Ask != "echo once" || rs[1].Ask != "echo sentinel" {
				t.Errorf("requests %q, %q", rs[0].Ask, rs[1].Ask)
			}
			if n := len(h.parents(rs[0].ID.String())); n != 1 {
				t.Errorf("%d parents for the event delivered three times", n)
			}
		})
	}
}

// Requests that are forged, stale, malformed or oversize are refused before
// anything happens; url_verification is answered.
func TestWebhookRefusals(t *testing.T) {
	h := newHarness(t, fast(setup{mode: slack.ModeEvents}))
	raw := "<@" + slacktest.BotUserID + "> coder echo forged"
	ts, err := h.fake.AddUserMessage(channel, member, raw, "")
	if err != nil {
		t.Fatal(err)
	}
	mention := slacktest.AppMentionEvent("EvFORGED", channel, member, raw, ts, "")
	click := []byte(slacktest.InteractivityForm(slacktest.BlockActionsPayload(owner, channel, ts, "", "approval:R20260101-01:1", "approve", "R20260101-01")).Encode())
	signed := func(path string, body []byte, ct string, sign func(*http.Request)) *http.Response {
		req, err := http.NewRequest(http.MethodPost, h.bridge.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		if sign != nil {
			sign(req)
		}
		return h.do(req)
	}
	with := func(sec string, at time.Time, body []byte) func(*http.Request) {
		return func(r *http.Request) { slacktest.SignRequest(r, body, sec, at) }
	}
	now := time.Now()
	big := append([]byte(`{"type":"event_callback","pad":"`), bytes.Repeat([]byte("x"), slack.MaxBody)...)
	big = append(big, `"}`...)
	for _, tc := range []struct {
		name, path, ct string
		body           []byte
		sign           func(*http.Request)
		want           int
	}{
		{"forged signature", "/slack/events", "application/json", mention, with("not-the-secret", now, mention), 401},
		{"signature of another body", "/slack/events", "application/json", mention, with(secret, now, []byte("{}")), 401},
		{"timestamp 6 minutes old", "/slack/events", "application/json", mention, with(secret, now.Add(-6*time.Minute), mention), 401},
		{"no signature", "/slack/events", "application/json", mention, nil, 401},
		{"forged click", "/slack/interactivity", "application/x-www-form-urlencoded", click, with("not-the-secret", now, click), 401},
		{"stale click", "/slack/interactivity", "application/x-www-form-urlencoded", click, with(secret, now.Add(-6*time.Minute), click), 401},
		{"malformed JSON", "/slack/events", "application/json", []byte("{not json"), with(secret, now, []byte("{not json")), 400},
		{"JSON without a type", "/slack/events", "application/json", []byte(`{"a":1}`), with(secret, now, []byte(`{"a":1}`)), 400},
		{"click without a payload", "/slack/interactivity", "application/x-www-form-urlencoded", []byte("x=1"), with(secret, now, []byte("x=1")), 400},
		{"click payload not JSON", "/slack/interactivity", "application/x-www-form-urlencoded", []byte("payload=%7Bnope"), with(secret, now, []byte("payload=%7Bnope")), 400},
		{"body over 1 MiB", "/slack/events", "application/json", big, with(secret, now, big), 413},
	} {
		if resp := signed(tc.path, tc.body, tc.ct, tc.sign); resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}

	chal := slacktest.URLVerification("challenge-123")
	req, _ := http.NewRequest(http.MethodPost, h.bridge.URL+"/slack/events", bytes.NewReader(chal))
	slacktest.SignRequest(req, chal, secret, now)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(got)) != "challenge-123" {
		t.Errorf("url_verification: %d %q", resp.StatusCode, got)
	}

	// Nothing changed: the next valid mention makes the first request.
	h.mention(member, "coder echo valid")
	h.requestsMade(1)
	if r := h.requests()[0]; r.Ask != "echo valid" {
		t.Errorf("the only request asks %q", r.Ask)
	}
	if n := len(h.fake.Ephemerals()); n != 0 {
		t.Errorf("%d ephemeral messages: a refused click reached the core", n)
	}
	// Each refusal is audited, at most rooms.RefusalsPerWindow per reason:
	// 6 signature failures, 2+2 bodies that are not payloads, 1 too big.
	recs, err := audit.List(h.ctx(), h.db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	byDetail := map[string]int{}
	for _, r := range recs {
		if r.Action == "webhook_refused" {
			if r.Actor != "slack:unverified" || r.Surface != chat.Slack {
				t.Errorf("refusal recorded as %+v", r)
			}
			byDetail[r.Detail]++
		}
	}
	want := map[string]int{"HTTP 401: signature check failed": rooms.RefusalsPerWindow, "HTTP 400: not an Events API payload": 2,
		"HTTP 400: not an interaction payload": 2, "HTTP 413: body over 1 MiB": 1}
	if !maps.Equal(byDetail, want) {
		t.Errorf("webhook_refused records %v, want %v", byDetail, want)
	}
}
