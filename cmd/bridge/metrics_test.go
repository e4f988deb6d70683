package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// TestMetricsAfterAScriptedRun drives one bridge through a scripted run (asks
// by an owner and a member on a fake Slack and the console, an approval
// approved, one denied and one expired by the sweeper, a cancel, a failed
// turn, a background task, a duplicate event, a 429 and an error from the
// fake Slack), then scrapes GET /metrics and checks the values. After a
// restart the values read from the store are the same.
func TestMetricsAfterAScriptedRun(t *testing.T) {
	const secret = "metrics-signing-secret"
	fake := slacktest.NewServer()
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bridge.yaml"), fmt.Sprintf(`owner: acme
owners: [slack:UOWNER, console:alice]
data_dir: ./data
console: {user: alice}
slack: {mode: events, bot_token: %s, app_token: %s, signing_secret: %s, api_url: %q}
approvals: {ttl: 1h, sweep: "@every 1s"}
rooms:
  - {name: backend, slack_channel: C1, agents: [coder], members: [slack:U1], approvers: [slack:UOWNER]}
  - {name: quick, slack_channel: C2, agents: [coder], approval_ttl: 1s}
  - {name: console, console: true, agents: [coder]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
`, slacktest.DefaultBotToken, slacktest.DefaultAppToken, secret, fake.APIURL(), bridgeBin))
	dataDir := filepath.Join(dir, "data")
	p := startBridge(t, dir, nil, "run", "--config", "bridge.yaml", "--http", "127.0.0.1:0")
	base, tok := p.api(dataDir)
	day := time.Now().UTC().Format("20060102")
	id := func(n int) string { return fmt.Sprintf("R%s-%02d", day, n) }

	// The first post to Slack is refused twice: a 429, then an error.
	fake.FailNext("chat.postMessage", http.StatusTooManyRequests, time.Second)
	fake.FailNextError("chat.postMessage", "internal_error")

	mention := func(eventID, channel, user, text string) {
		t.Helper()
		raw := "<@" + slacktest.BotUserID + "> " + text
		ts, err := fake.AddUserMessage(channel, user, raw, "")
		if err != nil {
			t.Fatal(err)
		}
		postEvent(t, base, secret, slacktest.AppMentionEvent(eventID, channel, user, raw, ts, ""))
	}
	// waitState waits until request n is in state.
	waitState := func(n int, state string) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%s %s", id(n), state), func() bool {
			var r struct {
				State string `json:"state"`
			}
			code, err := apiCall(http.MethodGet, base+"/v1/requests/"+id(n), tok, nil, &r)
			return err == nil && code == http.StatusOK && r.State == state
		})
	}
	post := func(path string) {
		t.Helper()
		if code := call(t, http.MethodPost, base+path, tok, nil, nil); code != http.StatusOK {
			t.Fatalf("POST %s: HTTP %d", path, code)
		}
	}

	mention("Ev1", "C1", "UOWNER", "coder echo hi") // an owner's: runs at once
	waitState(1, "done")
	mention("Ev2", "C1", "U1", "coder echo two") // a member's: waits for approval
	waitState(2, "pending")
	post("/v1/approvals/" + id(2) + "/approve")
	waitState(2, "done")
	mention("Ev3", "C2", "U1", "coder echo late") // expires after 1 s
	waitState(3, "expired")
	mention("Ev1", "C1", "UOWNER", "coder echo hi") // Slack's retry of Ev1

	p.send("@coder fail boom")
	waitState(4, "failed")
	p.send("/as bob")
	p.send("@coder echo cancel me")
	waitState(5, "pending")
	post("/v1/requests/" + id(5) + "/cancel")
	waitState(5, "cancelled")
	p.send("@coder echo deny me")
	waitState(6, "pending")
	post("/v1/approvals/" + id(6) + "/deny")
	waitState(6, "cancelled")
	p.send("/as alice")
	p.send("@coder background t1 true; yield on t1")
	waitState(7, "done")

	// Everything delivered: the outbox is empty on both surfaces.
	var got map[string]float64
	waitUntil(t, "the outbox empty", func() bool {
		got = scrapeMetrics(t, base)
		return got[`roombridge_outbox_depth{surface="slack"}`] == 0 && got[`roombridge_outbox_depth{surface="console"}`] == 0 &&
			got[`roombridge_delivery_latency_seconds_count{surface="slack"}`] > 0
	})

	rateLimited := 0
	for _, m := range []string{"chat.postMessage", "chat.update", "conversations.open"} {
		rateLimited += fake.RateLimited(m)
	}
	if rateLimited < 1 {
		t.Fatalf("the fake Slack answered no 429")
	}
	fromStore := map[string]float64{
		`roombridge_requests{agent="coder",state="done"}`:                       3,
		`roombridge_requests{agent="coder",state="failed"}`:                     1,
		`roombridge_requests{agent="coder",state="expired"}`:                    1,
		`roombridge_requests{agent="coder",state="cancelled"}`:                  2,
		`roombridge_requests_created_total{state="approved",surface="slack"}`:   1,
		`roombridge_requests_created_total{state="pending",surface="slack"}`:    2,
		`roombridge_requests_created_total{state="approved",surface="console"}`: 2,
		`roombridge_requests_created_total{state="pending",surface="console"}`:  2,
		`roombridge_request_transitions_total{from="approved",to="running"}`:    4,
		`roombridge_request_transitions_total{from="running",to="done"}`:        3,
		`roombridge_request_transitions_total{from="running",to="failed"}`:      1,
		`roombridge_request_transitions_total{from="pending",to="approved"}`:    1,
		`roombridge_request_transitions_total{from="pending",to="expired"}`:     1,
		`roombridge_request_transitions_total{from="pending",to="cancelled"}`:   2,
		`roombridge_outbox_depth{surface="slack"}`:                              0,
		`roombridge_outbox_depth{surface="console"}`:                            0,
		`roombridge_is_leader`:            1,
		`roombridge_leader_changes_total`: 1,
	}
	want := map[string]float64{
		`roombridge_approval_decisions_total{decision="approved"}`:                    1,
		`roombridge_approval_decisions_total{decision="denied"}`:                      1,
		`roombridge_approval_expiries_total`:                                          1,
		`roombridge_background_tasks_total{outcome="succeeded"}`:                      1,
		`roombridge_sweep_items_total{result="expired"}`:                              1,
		`roombridge_agent_turns_total{agent="coder",outcome="final"}`:                 3,
		`roombridge_agent_turns_total{agent="coder",outcome="yielded"}`:               1,
		`roombridge_agent_turns_total{agent="coder",outcome="failed"}`:                1,
		`roombridge_agent_turn_duration_seconds_count{agent="coder"}`:                 5,
		`roombridge_inbound_events_total{kind="ask",surface="slack"}`:                 4,
		`roombridge_inbound_events_total{kind="ask",surface="console"}`:               4,
		`roombridge_inbound_duplicates_total{surface="slack"}`:                        1,
		`roombridge_platform_rate_limited_total{surface="slack"}`:                     float64(rateLimited),
		`roombridge_platform_api_errors_total{code="internal_error",surface="slack"}`: 1,
	}
	for k, v := range fromStore {
		want[k] = v
	}
	checkMetrics(t, got, want)
	for _, k := range []string{`roombridge_sweep_duration_seconds_count`, `roombridge_delivery_latency_seconds_count{surface="console"}`} {
		if got[k] < 1 {
			t.Errorf("%s = %v, want at least 1", k, got[k])
		}
	}

	// Restart: what the store holds reads the same; what this instance
	// counted starts again.
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge did not stop within 30s")
	}
	if err := os.Remove(filepath.Join(dataDir, addrFile)); err != nil {
		t.Fatal(err)
	}
	p = startBridge(t, dir, nil, "run", "--config", "bridge.yaml", "--http", "127.0.0.1:0")
	base, _ = p.api(dataDir)
	fromStore[`roombridge_approval_decisions_total{decision="approved"}`] = 0
	fromStore[`roombridge_inbound_duplicates_total{surface="slack"}`] = 0
	waitUntil(t, "the restarted bridge leading", func() bool {
		return scrapeMetrics(t, base)[`roombridge_is_leader`] == 1
	})
	checkMetrics(t, scrapeMetrics(t, base), fromStore)
}

// postEvent POSTs a signed Slack event to the bridge's webhook, again while
// it answers 503 (the connector not running yet).
func postEvent(t *testing.T, base, secret string, body []byte) {
	t.Helper()
	waitUntil(t, "POST /slack/events accepted", func() bool {
		req, err := http.NewRequest(http.MethodPost, base+"/slack/events", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		slacktest.SignRequest(req, body, secret, time.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("POST /slack/events: HTTP %d", resp.StatusCode)
		}
		return resp.StatusCode == http.StatusOK
	})
}

// waitUntil polls cond every 20 ms until it holds, for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrapeMetrics GETs /metrics and parses the text format into
// `name{label="value",...}` (labels sorted) → value; a histogram gives its
// sample count as name_count.
func scrapeMetrics(t *testing.T, base string) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			key, v := name, 0.0
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				key, v = name+"_count", float64(m.Histogram.GetSampleCount())
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			}
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			out[key] = v
		}
	}
	return out
}

// checkMetrics checks every series of want; the other series of the metrics
// want names (histograms aside) must be 0.
func checkMetrics(t *testing.T, got, want map[string]float64) {
	t.Helper()
	name := func(k string) string {
		if i := strings.IndexByte(k, '{'); i >= 0 {
			return k[:i]
		}
		return k
	}
	names := map[string]bool{}
	for k, v := range want {
		names[name(k)] = true
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present: %v), want %v", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, listed := want[k]; !listed && names[name(k)] && !strings.HasSuffix(name(k), "_count") && v != 0 {
			t.Errorf("%s = %v, want 0", k, v)
		}
	}
}
