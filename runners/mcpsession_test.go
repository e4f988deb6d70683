package runners_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
)

// restartingClient is an agent whose MCP client restarts within the
// turn: each session (a new client, numbering its JSON-RPC ids from the
// start again) makes the same ask_agent call. It answers with what each
// call got, separated by a space.
type restartingClient struct{ sessions int }

func (a restartingClient) Run(ctx context.Context, t agents.Turn, _ agents.Sink) (agents.Outcome, error) {
	var got []string
	for i := range a.sessions {
		c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.MCPURL, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearer(t.MCPToken)}}, nil)
		if err != nil {
			return agents.Outcome{}, fmt.Errorf("mcp connect %d: %w", i, err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_agent",
			Arguments: map[string]any{"agent": "helper", "text": "run the tests"}})
		_ = cs.Close()
		if err != nil || res.IsError {
			return agents.Outcome{}, fmt.Errorf("ask_agent in session %d: %v %+v", i, err, res)
		}
		var out struct {
			RequestID string `json:"request_id"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		got = append(got, out.RequestID)
	}
	return agents.Outcome{Final: strings.Join(got, " ")}, nil
}

// TestMCPClientRestartReusesIDs: an agent's MCP client restarts within
// the turn and makes the same call under the same JSON-RPC id in its new
// session. That is a new call: it is carried out again (a second
// delegated request), not answered with the first session's answer (the
// proxy's key tells the client's sessions apart: before, both calls had
// one key, and the second got the first's request).
func TestMCPClientRestartReusesIDs(t *testing.T) {
	b := coretest.Start(t, coretest.Options{Config: cutConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console}, HoldOutbox: true})
	tok := addRunner(t, b.DB, "laptop")
	goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok,
		Agents: map[string]agents.Runtime{"coder": restartingClient{sessions: 2}}, Retry: 20 * time.Millisecond})
	waitConnected(t, b, "laptop")

	a := askEnded(t, b)
	if a.State != requests.Done {
		t.Fatalf("the request is %s (%s), want done", a.State, a.Reason)
	}
	got := strings.Fields(a.Result)
	if len(got) != 2 || got[0] == got[1] {
		t.Errorf("the two sessions' calls got %q, want two different delegated requests", got)
	}
	all, err := b.Requests().List(context.Background(), requests.Filter{Agent: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("%d delegated requests, want 2 (one per call)", len(all))
	}
	if n := replayed(t, b, a.ID); n != 0 {
		t.Errorf("%d call_replayed records, want none (no call was sent again)", n)
	}
}
