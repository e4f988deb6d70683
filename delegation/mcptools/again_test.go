package mcptools_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation/mcptools"
)

// post sends one JSON-RPC tools/call of tool with args (JSON) to url, as
// the runner's proxy does: with the turn's token and the call's key.
func post(t *testing.T, url, token, key, tool, args string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(agents.MCPCallKeyHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestKeyedCallAcrossStop: a request_approval with an idempotency key,
// waiting for people when the bridge stops (Close), is answered 503 (the
// runner's proxy sends it again) rather than the tool error an agent would
// take for the call's end; sent again with the same key to the next
// bridge on the same store, it waits on the same approval (no second one
// is opened: call_replayed), and gets its decision.
func TestKeyedCallAcrossStop(t *testing.T) {
	e := newEnv(t)
	ra := e.running("coder", "deploy")
	tok, _ := e.issue(ra.ID)
	const key, args = "k-approval-1", `{"action":"deploy to prod"}`
	type answer struct {
		status int
		body   string
	}
	first := make(chan answer, 1)
	go func() {
		st, b := post(t, e.url, tok, key, "request_approval", args)
		first <- answer{st, b}
	}()
	pending := func() []approvals.Item {
		in, err := e.appr.Inbox(e.ctx, "main")
		if err != nil {
			t.Fatal(err)
		}
		return in.Items
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(pending()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no approval pending 10 s after the call")
		}
		time.Sleep(5 * time.Millisecond) // polling the store for the condition, with a deadline
	}
	e.mcp.Close()
	select {
	case a := <-first:
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "stopping") {
			t.Errorf("the call cut by the stop: HTTP %d %s; want 503 saying the bridge is stopping", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call still runs 10 s after Close")
	}

	next := mcptools.New(mcptools.Options{Requests: e.svc, Calls: e.sched})
	hs := httptest.NewServer(next)
	t.Cleanup(hs.Close)
	t.Cleanup(next.Close)
	again := make(chan answer, 1)
	go func() {
		st, b := post(t, hs.URL+"/mcp", tok, key, "request_approval", args)
		again <- answer{st, b}
	}()
	deadline = time.Now().Add(10 * time.Second)
	for !hasAudit(t, e, ra.ID, "call_replayed", "request_approval") {
		if time.Now().After(deadline) {
			t.Fatal("the call sent again was not replayed within 10 s")
		}
		time.Sleep(5 * time.Millisecond) // polling the store for the condition, with a deadline
	}
	items := pending()
	if len(items) != 1 {
		t.Fatalf("%d approvals pending, want the first one only", len(items))
	}
	if _, err := e.appr.Decide(e.ctx, items[0].Approval.ID, approvals.Approve, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-again:
		if a.status != http.StatusOK || !strings.Contains(a.body, `"approved":true`) {
			t.Errorf("the call sent again: HTTP %d %s; want 200, approved", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer 10 s after the decision")
	}
}
