package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// secretValue is a random secret with a recognisable prefix.
func secretValue(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// encodings are the forms a secret could take in a log line: as is (also
// inside "Bearer …" or JSON), URL-encoded, base64 in its four variants, and
// as HTTP basic auth with an app ID.
func encodings(secret, user string) []string {
	out := []string{secret, url.QueryEscape(secret), url.PathEscape(secret)}
	for _, s := range []string{secret, user + ":" + secret} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			out = append(out, enc.EncodeToString([]byte(s)))
		}
	}
	return out
}

// TestNoSecretInLogs runs the bridge at debug level with every secret the
// config can hold (Slack bot and app tokens and signing secret, Feishu app
// secret, verification token and encrypt key, the API token) against the
// fake Slack and Feishu, drives a small workload through both platforms, the
// API and the agent tools over MCP (with the per-turn tokens the agents
// got), including failures that log errors (platform 500s and API errors,
// a failed tenant token, refused webhooks, wrong API and MCP tokens, a
// revoked MCP token), stops it, and greps the whole log for each secret and
// its obvious encodings. Once with Socket Mode and the long connection, in
// JSON (--log-format json); once with the Events API and the HTTP callback,
// in text (log.format).
func TestNoSecretInLogs(t *testing.T) {
	for _, m := range []struct{ slack, feishu, format string }{
		{"socket", feishu.ModeWS, "json"},
		{"events", feishu.ModeCallback, "text"},
	} {
		t.Run(m.slack+"+"+m.feishu, func(t *testing.T) {
			t.Parallel()
			secretWorkload(t, m.slack, m.feishu, m.format)
		})
	}
}

func secretWorkload(t *testing.T, slackMode, feishuMode, format string) {
	const (
		channel  = "C0SECRET"
		chatID   = "oc_secret"
		owner    = "UOWNER"
		fsOwner  = "ou_owner"
		waitTime = 40 * time.Second
	)
	secrets := map[string]string{
		"slack.bot_token":           secretValue("xoxb-"),
		"slack.app_token":           secretValue("xapp-"),
		"slack.signing_secret":      secretValue("ss"),
		"feishu.app_secret":         secretValue("fas"),
		"feishu.verification_token": secretValue("fvt"),
		"feishu.encrypt_key":        secretValue("fek"),
		"http.api_token":            secretValue("api"),
	}
	appID := "cli_" + secretValue("")[:12]
	ctx, cancel := context.WithTimeout(context.Background(), waitTime)
	defer cancel()

	sfake := slacktest.NewServer(slacktest.Tokens(secrets["slack.bot_token"], secrets["slack.app_token"]))
	defer sfake.Close()
	ffake := feishutest.New(appID, secrets["feishu.app_secret"])
	defer ffake.Close()

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	tokens := filepath.Join(dir, "mcp-tokens")
	agentCmd := fmt.Sprintf(`echo "$ROOMBRIDGE_MCP_TOKEN" >> %s; exec %s demo-agent`, tokens, bridgeBin)
	logKeys := "log: {level: debug, format: " + format + "}"
	args := []string{"run", "--config", filepath.Join(dir, "bridge.yaml")}
	if format == "json" {
		logKeys = "log: {level: debug}"
		args = append(args, "--log-format", "json")
	}
	writeFile(t, filepath.Join(dir, "bridge.yaml"), fmt.Sprintf(`owner: acme
owners: [slack:%s, feishu:%s]
data_dir: %s
http: {addr: "127.0.0.1:0", api_token: %q}
slack: {mode: %s, bot_token: %q, app_token: %q, signing_secret: %q, api_url: %q}
feishu: {mode: %s, app_id: %s, app_secret: %q, verification_token: %q, encrypt_key: %q, base_url: %q}
rooms:
  - {name: main, slack_channel: %s, feishu_chat: %s, agents: [coder]}
agents:
  coder: {kind: exec, command: [/bin/sh, -c, %q]}
%s
`, owner, fsOwner, data, secrets["http.api_token"],
		slackMode, secrets["slack.bot_token"], secrets["slack.app_token"], secrets["slack.signing_secret"], sfake.APIURL(),
		feishuMode, appID, secrets["feishu.app_secret"], secrets["feishu.verification_token"], secrets["feishu.encrypt_key"], ffake.URL(),
		channel, chatID, agentCmd, logKeys))

	// Failures for the connectors to log: the first Feishu post and reply
	// and the first Slack post fail; a Slack update is refused.
	ffake.FailNext(feishutest.RouteCreate, http.StatusInternalServerError, 1, 0)
	ffake.FailNext(feishutest.RouteReply, http.StatusBadRequest, 99991663, 0)
	sfake.FailNext("chat.postMessage", http.StatusInternalServerError, 0)
	sfake.FailNextError("chat.update", "invalid_auth")

	p := startBridge(t, dir, nil, args...)
	base := waitAPI(t, p, data)
	// The API serves before the leader's work (the connectors) starts: a
	// webhook before that is refused, for the platform to deliver again.
	waitStderr(t, p, "connected to Slack")
	if feishuMode == feishu.ModeCallback {
		waitStderr(t, p, "feishu: receiving events over HTTP")
	}
	apiToken := secrets["http.api_token"]

	// Slack: a mention, and (events mode) a forged webhook.
	raw := "<@" + slacktest.BotUserID + "> coder say slack-said; echo slack-done"
	ts, err := sfake.AddUserMessage(channel, owner, raw, "")
	if err != nil {
		t.Fatal(err)
	}
	mention := slacktest.AppMentionEvent("EvSECRET1", channel, owner, raw, ts, "")
	if slackMode == "socket" {
		if err := sfake.WaitFor(ctx, func(s *slacktest.Server) bool { return s.Connections() > 0 }); err != nil {
			t.Fatalf("waiting for socket mode: %v", err)
		}
		if _, err := sfake.PushEventsAPI(ctx, mention); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, secret := range []string{"wrong-secret", secrets["slack.signing_secret"]} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/slack/events", bytes.NewReader(mention))
			req.Header.Set("Content-Type", "application/json")
			slacktest.SignRequest(req, mention, secret, time.Now())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}

	// Feishu: a mention, and (callback mode) a forged and a wrongly signed
	// callback.
	event := feishutest.MessageEvent{EventID: "ev_secret1", Token: secrets["feishu.verification_token"], AppID: appID,
		SenderOpenID: fsOwner, ChatID: chatID, Text: "@_user_1 coder say feishu-said; echo feishu-done",
		Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: ffake.BotOpenID(), Name: "roombridge"}}}.JSON()
	if feishuMode == feishu.ModeWS {
		if err := ffake.WaitFor(ctx, func() bool { return ffake.Connections() > 0 }); err != nil {
			t.Fatalf("waiting for the long connection: %v", err)
		}
		if _, err := ffake.PushEvent(ctx, event); err != nil {
			t.Fatal(err)
		}
	} else {
		forged := feishutest.MessageEvent{EventID: "ev_forged", Token: "not-the-token", AppID: appID, SenderOpenID: fsOwner,
			ChatID: chatID, Text: "@_user_1 coder echo forged"}.JSON()
		for _, c := range []struct {
			body []byte
			key  string
		}{{event, "wrong-key"}, {forged, secrets["feishu.encrypt_key"]}, {event, secrets["feishu.encrypt_key"]}} {
			enc, err := feishutest.Encrypt(secrets["feishu.encrypt_key"], c.body)
			if err != nil {
				t.Fatal(err)
			}
			req, err := feishutest.SignedRequest(ctx, base+feishu.EventsPath, c.key, []byte(enc), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}

	// The API: a wrong token, then a request whose agent holds its turn
	// while the test uses the agent's MCP token.
	if code, _ := apiCall(http.MethodGet, base+"/v1/requests", "wrong-"+apiToken[:8], nil, nil); code != http.StatusUnauthorized {
		t.Errorf("a wrong API token: HTTP %d", code)
	}
	hold := filepath.Join(dir, "hold")
	var r requests.Request
	if code := call(t, http.MethodPost, base+"/v1/requests", apiToken, map[string]string{"room": "main", "text": "tool hold " + hold + "; echo held"}, &r); code != http.StatusCreated {
		t.Fatalf("create: HTTP %d", code)
	}
	pollUntil(t, ctx, "the held request's turn", func() bool {
		var cur requests.Request
		return call(t, http.MethodGet, base+"/v1/requests/"+r.ID.String(), apiToken, nil, &cur) == http.StatusOK && cur.Activity == "hold"
	})
	live := mcpTokens(t, tokens)
	if len(live) == 0 {
		t.Fatal("no agent got an MCP token (ROOMBRIDGE_MCP_TOKEN)")
	}
	last := live[len(live)-1]
	for _, tok := range []string{last, "rbt_" + strings.Repeat("0", 64)} {
		mcpCall(t, ctx, base, tok, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		mcpCall(t, ctx, base, tok, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"report_progress","arguments":{"percent":50,"text":"half"}}}`)
	}
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// Everything ends: three requests done, both platforms got their
	// answers (after the injected failures).
	pollUntil(t, ctx, "three requests done", func() bool {
		var list struct{ Requests []requests.Request }
		call(t, http.MethodGet, base+"/v1/requests", apiToken, nil, &list)
		n := 0
		for _, r := range list.Requests {
			if r.State == requests.Done {
				n++
			}
		}
		return n == 3
	})
	if err := sfake.WaitFor(ctx, func(s *slacktest.Server) bool {
		for _, m := range s.Messages() {
			if m.Text == "slack-done" {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the Slack answer: %v", err)
	}
	if err := ffake.WaitFor(ctx, func() bool {
		for _, m := range ffake.Messages() {
			if strings.Contains(string(m.Content), "feishu-done") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the Feishu answer: %v", err)
	}
	// The held turn's token is revoked now: a call with it is refused.
	mcpCall(t, ctx, base, last, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)

	stopBridge(t, p, syscall.SIGTERM)
	if code := waitExit(t, p, 30*time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	log := p.Stderr()
	for _, want := range []string{"level=DEBUG", "delivery failed", "mcp request refused", "stopping gracefully"} {
		if format == "json" {
			want = strings.Replace(want, "level=DEBUG", `"level":"DEBUG"`, 1)
		}
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q: the workload did not run as meant", want)
		}
	}
	if format == "json" {
		sc := bufio.NewScanner(strings.NewReader(log))
		for sc.Scan() {
			if line := sc.Text(); !json.Valid([]byte(line)) && !strings.HasPrefix(line, "WARNING: DATA RACE") {
				t.Errorf("not a JSON log line: %q", line)
			}
		}
	}
	secrets["tenant access token"] = ffake.TenantToken()
	for i, tok := range mcpTokens(t, tokens) {
		secrets[fmt.Sprintf("MCP token %d", i)] = tok
	}
	for name, secret := range secrets {
		for _, enc := range encodings(secret, appID) {
			if i := strings.Index(log, enc); i >= 0 {
				line := log[strings.LastIndexByte(log[:i], '\n')+1:]
				line, _, _ = strings.Cut(line, "\n")
				t.Errorf("the log holds %s (as %q) in:\n%s", name, enc, line)
			}
		}
	}
	t.Logf("%d log lines checked for %d secrets", strings.Count(log, "\n"), len(secrets))
}

// waitAPI waits for the daemon whose data dir is data to serve, and returns
// its base URL.
func waitAPI(t *testing.T, p *proc, data string) string {
	t.Helper()
	var base string
	pollUntil(t, context.Background(), "the API", func() bool {
		addr, err := os.ReadFile(filepath.Join(data, "http.addr"))
		if err != nil || !bytes.HasSuffix(addr, []byte("\n")) {
			return false
		}
		base = "http://" + strings.TrimSpace(string(addr))
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return base
}

// pollUntil polls cond every 20 ms until it holds, for at most 30 s or until
// ctx ends.
func pollUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waiting for %s: gave up", what)
		}
		time.Sleep(20 * time.Millisecond) // a polling tick
	}
}

// mcpTokens reads the per-turn MCP tokens the agents recorded.
func mcpTokens(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// mcpCall posts one JSON-RPC message to /mcp with token (the answer does
// not matter here: what the bridge logs does).
func mcpCall(t *testing.T, ctx context.Context, base, token, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
