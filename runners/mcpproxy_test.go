package runners_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/tlstest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
)

// bearer adds an Authorization header to each request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// mcpAgent is an agent (in Go, standing in for a CLI) that calls
// report_progress at its turn's MCP endpoint with its token, as Claude
// Code and Codex do, and answers with what it saw; after the turn it
// reports whether its token still opens the endpoint.
type mcpAgent struct {
	seen  chan string // "URL TOKEN" of each turn
	after chan int    // the endpoint's status for the token once the turn has ended
	// progress reads the request's progress in the bridge's store.
	progress func(id string) int
}

func (a *mcpAgent) Run(ctx context.Context, t agents.Turn, _ agents.Sink) (agents.Outcome, error) {
	a.seen <- t.MCPURL + " " + t.MCPToken
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.MCPURL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer(t.MCPToken)}}, nil)
	if err != nil {
		return agents.Outcome{}, fmt.Errorf("mcp connect: %w", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "report_progress", Arguments: map[string]any{"percent": 40, "text": "halfway"}})
	_ = cs.Close()
	if err != nil {
		return agents.Outcome{}, fmt.Errorf("report_progress: %w", err)
	}
	if res.IsError {
		return agents.Outcome{}, fmt.Errorf("report_progress refused: %+v", res.Content)
	}
	go a.probe(t)
	// The report is in the store when the call returns.
	return agents.Outcome{Final: fmt.Sprintf("reported %d", a.progress(t.RequestID))}, nil
}

// probe posts to the endpoint with the turn's token once the turn's
// request has ended (the runner revokes its local token when Run returns).
func (a *mcpAgent) probe(t agents.Turn) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPost, t.MCPURL, strings.NewReader(`{}`))
		resp, err := (&http.Client{Transport: bearer(t.MCPToken)}).Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized || time.Now().After(deadline) {
				a.after <- resp.StatusCode
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMCPProxy: an agent on the runner calls the bridge's tools at the
// runner's localhost endpoint with the runner's local token; the proxy
// forwards the call with the turn's token to the bridge, over plaintext
// and over TLS with the runner's CA (before, the proxy trusted only the
// system roots: every call to such a bridge was a 502); the report lands
// in the request; the local token is dead once the turn ended.
func TestMCPProxy(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			dir := t.TempDir()
			cfg := bridgeConfig
			var tlsCfg *tls.Config
			if secure {
				f := tlstest.Write(t, dir)
				cfg += "http: {tls_cert_file: %DIR%/server.pem, tls_key_file: %DIR%/server.key}\n"
				tlsCfg = &tls.Config{RootCAs: f.Pool(t), MinVersion: tls.VersionTLS12}
			}
			b := coretest.Start(t, coretest.Options{Config: cfg, Dir: dir, Surfaces: []string{chat.Console}, HoldOutbox: true})
			tok, err := runners.Add(context.Background(), b.DB, time.Now(), "laptop")
			if err != nil {
				t.Fatal(err)
			}
			a := &mcpAgent{seen: make(chan string, 4), after: make(chan int, 4), progress: func(id string) int {
				rid, err := requests.ParseID(id)
				if err != nil {
					return -1
				}
				r, err := b.Requests().Get(context.Background(), rid)
				if err != nil {
					return -1
				}
				return r.Progress
			}}
			goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok, TLS: tlsCfg,
				Agents: map[string]agents.Runtime{"coder": a}, Retry: 20 * time.Millisecond})
			waitConnected(t, b, "laptop")

			got := askEnded(t, b)
			if got.State != requests.Done || got.Result != "reported 40" {
				t.Fatalf("%s: result %q reason %q; want done, \"reported 40\"", got.State, got.Result, got.Reason)
			}
			seen := <-a.seen
			if !strings.HasPrefix(seen, "http://127.0.0.1:") || strings.Contains(seen, b.URL) || !strings.Contains(seen, " rl_") {
				t.Errorf("the agent got %q, want the runner's localhost endpoint and a local token (the bridge is %s)", seen, b.URL)
			}
			select {
			case code := <-a.after:
				if code != http.StatusUnauthorized {
					t.Errorf("the ended turn's local token got %d, want 401", code)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("no probe after the turn")
			}
		})
	}
}
