package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBadInput: unknown and malformed IDs, missing and wrong tokens, bad
// bodies: each is refused with a clear error and changes nothing.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, testConfig(dir))
	p := startBridge(t, dir, nil, "run", "--config", cfg)
	base, token := p.api(filepath.Join(dir, "data"))
	unknown := "R" + time.Now().UTC().Format("20060102") + "-99"

	type errBody struct {
		Error string `json:"error"`
	}
	for _, c := range []struct {
		name, method, path, token string
		body                      any
		want                      int
		msg                       string
	}{
		{"no token", "GET", "/v1/requests", "", nil, 401, "API token"},
		{"wrong token", "GET", "/v1/requests", "nope", nil, 401, "API token"},
		{"unknown ID", "GET", "/v1/requests/" + unknown, token, nil, 404, "unknown request " + unknown},
		{"malformed ID", "GET", "/v1/requests/R2026-x", token, nil, 400, "malformed request ID"},
		{"bad state", "GET", "/v1/requests?state=sleeping", token, nil, 400, "unknown state"},
		{"malformed JSON", "POST", "/v1/requests", token, "{not json", 400, "malformed JSON"},
		{"unknown room", "POST", "/v1/requests", token, map[string]string{"room": "nowhere", "text": "x"}, 400, "unknown room"},
		{"oversize body", "POST", "/v1/requests", token, map[string]string{"room": "main", "text": strings.Repeat("x", 2<<20)}, 413, "body over"},
		{"cancel unknown", "POST", "/v1/requests/" + unknown + "/cancel", token, nil, 404, "unknown request"},
		{"bad since", "GET", "/v1/audit?since=yesterday", token, nil, 400, "since"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var e errBody
			var body any = c.body
			if s, ok := c.body.(string); ok {
				body = rawJSON(s)
			}
			code := call(t, c.method, base+c.path, c.token, body, &e)
			if code != c.want || !strings.Contains(e.Error, c.msg) {
				t.Errorf("%s %s = %d %q, want %d with %q", c.method, c.path, code, e.Error, c.want, c.msg)
			}
		})
	}
	var list struct {
		Count int `json:"count"`
	}
	call(t, "GET", base+"/v1/requests", token, nil, &list)
	if list.Count != 0 {
		t.Errorf("bad input created %d requests", list.Count)
	}

	// The CLI: clear messages, exit code 1.
	_, stderr, code := runCLI(t, dir, "requests", "show", "--config", cfg, unknown)
	if code != 1 || !strings.Contains(stderr, "unknown request "+unknown) {
		t.Errorf("requests show unknown: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, dir, "requests", "show", "--config", cfg, "R-x")
	if code != 1 || !strings.Contains(stderr, "malformed request ID") {
		t.Errorf("requests show malformed: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, dir, "cancel", "--config", cfg, unknown)
	if code != 1 || !strings.Contains(stderr, "unknown request") {
		t.Errorf("cancel unknown: exit %d, stderr %q", code, stderr)
	}

	// Refused calls are audited.
	out, stderr, code := runCLI(t, dir, "audit", "export", "--config", cfg, "--format", "csv")
	if code != 0 {
		t.Fatalf("audit export: exit %d: %s", code, stderr)
	}
	if n := strings.Count(out, "auth_refused"); n != 2 {
		t.Errorf("audit has %d auth_refused records, want 2:\n%s", n, out)
	}
	if !strings.HasPrefix(out, "seq,time,request_id,actor") {
		t.Errorf("CSV export lacks its header: %q", out)
	}
}

// rawJSON is a body sent as is.
type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, testConfig(dir))
	out, stderr, code := runCLI(t, dir, "config", "check", "--config", good)
	if code != 0 || !strings.Contains(out, "config ok") {
		t.Fatalf("good config: exit %d, %s %s", code, out, stderr)
	}
	for _, c := range []struct{ name, yaml, key string }{
		{"unknown top-level key", "bogus: 1\n" + testConfig(dir), "bogus: unknown key"},
		{"unknown nested key", strings.Replace(testConfig(dir), "console: true,", "console: true, colour: red,", 1), "rooms[0].colour: unknown key"},
		{"unknown agent key", strings.Replace(testConfig(dir), "coder: {kind: exec,", "coder: {knd: x, kind: exec,", 1), "agents.coder.knd: unknown key"},
		{"missing owner", strings.Replace(testConfig(dir), "owner: acme\n", "", 1), "owner: required"},
		{"missing command", strings.Replace(testConfig(dir), fmt.Sprintf("reviewer: {kind: exec, command: [%q, demo-agent]}", bridgeBin), "reviewer: {kind: exec}", 1), "agents.reviewer.command: required"},
		{"unknown agent in room", strings.Replace(testConfig(dir), "agents: [coder, reviewer]", "agents: [coder, ghost]", 1), `rooms[0].agents[1]: unknown agent "ghost"`},
		{"unset env", strings.Replace(testConfig(dir), "owner: acme", "owner: ${ROOMBRIDGE_TEST_UNSET}", 1), "owner: environment variable ROOMBRIDGE_TEST_UNSET is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.yaml")
			writeFile(t, path, c.yaml)
			_, stderr, code := runCLI(t, dir, "config", "check", "--config", path)
			if code != 1 || !strings.Contains(stderr, c.key) {
				t.Errorf("exit %d, stderr %q; want exit 1 naming %q", code, stderr, c.key)
			}
		})
	}
	_, stderr, code = runCLI(t, dir, "frobnicate")
	if code != 2 || !strings.Contains(stderr, "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, stderr)
	}
}
