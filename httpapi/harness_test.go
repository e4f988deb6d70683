package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/store"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// testConfig: one Slack room with the two demo agents; %EXTRA% is replaced
// by each test's own keys.
const testConfig = `
owner: acme
owners: [slack:UOWNER]
data_dir: %DIR%
slack: {mode: socket, bot_token: xoxb-test, app_token: xapp-test}
rooms:
  - {name: main, slack_channel: C1, agents: [coder, reviewer]}
agents:
  coder: {kind: exec, command: [demo]}
  reviewer: {kind: exec, command: [demo]}
%EXTRA%
`

// env is a whole bridge (coretest) with a fake clock, and a client of its
// real HTTP server.
type env struct {
	t   *testing.T
	b   *coretest.Bridge
	clk *clock.Fake
}

// start runs a bridge with extra config keys; idle: no agent runs (asks
// stay queued).
func start(t *testing.T, extra string, idle bool, st store.Store) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	b := coretest.Start(t, coretest.Options{Config: strings.ReplaceAll(testConfig, "%EXTRA%", extra), Dir: t.TempDir(),
		Clock: clk, Surfaces: []string{chat.Slack}, Idle: idle, Store: st})
	return &env{t: t, b: b, clk: clk}
}

// call sends a request with the API token (token "": none) and decodes a
// JSON answer into out (if not nil); it returns the response, body read.
func (e *env) call(method, path, token string, body string, hdr map[string]string, out any) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.b.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp, b
}

// api is call with the token.
func (e *env) api(method, path, body string, out any) *http.Response {
	e.t.Helper()
	resp, _ := e.call(method, path, coretest.Token, body, nil, out)
	return resp
}

// errBody is an error answer.
type errBody struct {
	Error string `json:"error"`
}

// auditRecords reads the whole audit log from the store.
func (e *env) auditRecords(action string) []audit.Record {
	e.t.Helper()
	var buf bytes.Buffer
	if _, err := audit.Export(e.t.Context(), e.b.Requests().Store(), audit.Query{}, audit.JSONL, &buf, nil); err != nil {
		e.t.Fatal(err)
	}
	var out []audit.Record
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var r audit.Record
		if err := dec.Decode(&r); err != nil {
			e.t.Fatal(err)
		}
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}
