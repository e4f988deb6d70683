package runners_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/tcpcut"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
)

// cutConfig has a second agent for coder to ask (hosted by a runner that
// never connects: its request stays queued, so it is easy to count).
const cutConfig = `
owner: acme
owners: [console:you]
data_dir: %DIR%
rooms:
  - {name: main, console: true, agents: [coder, helper], approvers: [console:you]}
agents:
  coder: {kind: runner, runner: laptop}
  helper: {kind: runner, runner: desk}
runners: {grace: 30s, heartbeat: 1s}
`

// oneCall is an agent that makes one MCP tool call (no retries of its
// own: MaxRetries -1) and answers with the call's structured result, then
// with what after says.
type oneCall struct {
	tool  string
	args  map[string]any
	after func(requestID string) string
}

func (a oneCall) Run(ctx context.Context, t agents.Turn, _ agents.Sink) (agents.Outcome, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.MCPURL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer(t.MCPToken)}}, nil)
	if err != nil {
		return agents.Outcome{}, fmt.Errorf("mcp connect: %w", err)
	}
	defer func() { _ = cs.Close() }()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: a.tool, Arguments: a.args})
	if err != nil {
		return agents.Outcome{}, fmt.Errorf("%s: %w", a.tool, err)
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		return agents.Outcome{}, fmt.Errorf("%s failed: %s", a.tool, b)
	}
	out, _ := json.Marshal(res.StructuredContent)
	return agents.Outcome{Final: string(out) + " " + a.after(t.RequestID)}, nil
}

// cut is what the network cut saw of the first call of its tool.
type cut struct {
	key     string // its idempotency key
	status  int    // the bridge's answer, never delivered
	version int64  // the asking request's version once the call was done
}

// cutRun runs a bridge whose network on the runner's first URL (its
// stream and its MCP calls) goes away for good just after the bridge
// carried out the first call of tool, before its answer is sent (a leader
// that dies with the call done); the runner's second URL reaches the same
// bridge (the next leader, with the same store). It returns the bridge, the
// asking request once ended, and what the cut saw.
func cutRun(t *testing.T, tool string, args map[string]any, after func(b *coretest.Bridge, id string) string) (*coretest.Bridge, *requests.Request, cut) {
	t.Helper()
	return cutRunAt(t, false, tool, args, after)
}

// cutRunAt is cutRun, or with midBody the bridge's connection instead
// drops halfway through the answer of the call it carried out (the
// headers and half the body sent, then the connection closed, the
// network kept): the call is sent again on the same URL.
func cutRunAt(t *testing.T, midBody bool, tool string, args map[string]any, after func(b *coretest.Bridge, id string) string) (*coretest.Bridge, *requests.Request, cut) {
	t.Helper()
	var bridge atomic.Pointer[coretest.Bridge]
	var net atomic.Pointer[tcpcut.Proxy]
	var first atomic.Bool
	seen, again := make(chan cut, 1), make(chan string, 4)
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/mcp" {
				h.ServeHTTP(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte(`"tools/call"`)) || !bytes.Contains(body, []byte(`"name":"`+tool+`"`)) {
				h.ServeHTTP(w, r)
				return
			}
			if !first.CompareAndSwap(false, true) {
				again <- r.Host + " " + r.Header.Get(agents.MCPCallKeyHeader)
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r) // the bridge carries the call out...
			b := bridge.Load()
			rs, _ := b.Requests().List(context.Background(), requests.Filter{Agent: "coder"})
			c := cut{key: r.Header.Get(agents.MCPCallKeyHeader), status: rec.Code}
			if len(rs) == 1 {
				c.version = rs[0].Version
			}
			seen <- c
			if midBody {
				halfAnswer(w, rec) // ...and the connection drops halfway through its answer
			} else {
				net.Load().Cut() // ...and the network goes before its answer
			}
			panic(http.ErrAbortHandler)
		})
	}
	b := coretest.Start(t, coretest.Options{Config: cutConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console}, HoldOutbox: true, Wrap: wrap})
	bridge.Store(b)
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, next := tcpcut.New(t, u.Host), tcpcut.New(t, u.Host)
	net.Store(p)
	tok := addRunner(t, b.DB, "laptop")
	agent := oneCall{tool: tool, args: args, after: func(id string) string { return after(b, id) }}
	goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL(), next.URL()}, Token: tok,
		Agents: map[string]agents.Runtime{"coder": agent}, Retry: 20 * time.Millisecond})
	waitConnected(t, b, "laptop")

	got := askEnded(t, b)
	var c cut
	select {
	case c = <-seen:
	default:
		t.Fatalf("the %s call was never cut", tool)
	}
	select {
	case a := <-again:
		want := next.Addr() + " " + c.key
		if midBody {
			want = p.Addr() + " " + c.key
		}
		if a != want {
			t.Errorf("the call was sent again to and with %q, want %q (the runner's current bridge, the same key)", a, want)
		}
	default:
		t.Errorf("the %s call was never sent again", tool)
	}
	return b, got, c
}

// halfAnswer sends rec's headers, its length, and half its body, flushed:
// the answer then stops short.
func halfAnswer(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	body := rec.Body.Bytes()
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body[:len(body)/2])
	_ = http.NewResponseController(w).Flush()
}

// sentWithKey checks that the cut call was carried out and carried an
// idempotency key.
func sentWithKey(t *testing.T, c cut) {
	t.Helper()
	if c.status != http.StatusOK || c.key == "" {
		t.Errorf("the cut call: bridge's answer %d, key %q; want 200 and a key", c.status, c.key)
	}
}

// replayed counts request id's call_replayed audit records.
func replayed(t *testing.T, b *coretest.Bridge, id requests.ID) int {
	t.Helper()
	n := 0
	err := audit.Each(context.Background(), b.DB, audit.Query{RequestID: id.String()}, func(r *audit.Record) error {
		if r.Action == "call_replayed" {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMCPAskAgentCutMidCall: the network goes (as with a leader's failover)
// after the bridge made the delegated request of an ask_agent call and
// before its answer reached the runner. The runner's proxy sends the call
// again, once re-attached, with the call's idempotency key: the agent gets
// the delegated request's ID, as if nothing happened, and only one
// delegated request exists (before: the agent saw a tool error, 502, and
// an agent retrying the tool itself made a second request).
func TestMCPAskAgentCutMidCall(t *testing.T) {
	b, a, c := cutRun(t, "ask_agent", map[string]any{"agent": "helper", "text": "check the build"},
		func(*coretest.Bridge, string) string { return "" })
	if a.State != requests.Done {
		t.Fatalf("the asking request is %s (%s), want done: the cut call was not answered", a.State, a.Reason)
	}
	all, err := b.Requests().List(context.Background(), requests.Filter{Agent: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	var delegated []string
	for _, r := range all {
		if r.DelegatedBy == a.ID {
			delegated = append(delegated, r.ID.String())
		}
	}
	if len(delegated) != 1 {
		t.Fatalf("delegated requests %v, want exactly one", delegated)
	}
	if want := `{"request_id":"` + delegated[0] + `"}`; !strings.HasPrefix(a.Result, want) {
		t.Errorf("the agent got %q, want %s", a.Result, want)
	}
	if n := replayed(t, b, a.ID); n != 1 {
		t.Errorf("%d call_replayed records, want 1 (the call sent again)", n)
	}
	sentWithKey(t, c)
}

// TestMCPProgressCutMidCall: a report_progress cut after the bridge applied
// it, before its answer, is sent again by the proxy and applied once: the
// request's version is the one the first application left, and the agent
// gets ok.
func TestMCPProgressCutMidCall(t *testing.T) {
	b, a, c := cutRun(t, "report_progress", map[string]any{"percent": 40, "text": "halfway"},
		func(b *coretest.Bridge, id string) string {
			rid, err := requests.ParseID(id)
			if err != nil {
				return err.Error()
			}
			r, err := b.Requests().Get(context.Background(), rid)
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("version %d progress %d", r.Version, r.Progress)
		})
	if a.State != requests.Done {
		t.Fatalf("the request is %s (%s), want done: the cut call was not answered", a.State, a.Reason)
	}
	if want := fmt.Sprintf(`{"ok":true} version %d progress 40`, c.version); a.Result != want {
		t.Errorf("the agent answered %q, want %q (the report applied once)", a.Result, want)
	}
	if n := replayed(t, b, a.ID); n != 1 {
		t.Errorf("%d call_replayed records, want 1 (the call sent again)", n)
	}
	sentWithKey(t, c)
}

// TestMCPAnswerCutMidBody: the bridge carried out an ask_agent call and
// its connection drops halfway through the answer's body. The runner's
// proxy reads a keyed call's answer whole before handing it to the agent,
// so the cut answer counts as none: the call is sent again with its key
// and the agent gets the first answer whole (before: the proxy had
// already passed the headers and half the body on, and the agent's call
// failed on a truncated answer).
func TestMCPAnswerCutMidBody(t *testing.T) {
	b, a, c := cutRunAt(t, true, "ask_agent", map[string]any{"agent": "helper", "text": "check the build"},
		func(*coretest.Bridge, string) string { return "" })
	if a.State != requests.Done {
		t.Fatalf("the asking request is %s (%s), want done: the cut answer was not resent whole", a.State, a.Reason)
	}
	all, err := b.Requests().List(context.Background(), requests.Filter{Agent: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || !strings.HasPrefix(a.Result, `{"request_id":"`+all[0].ID.String()+`"}`) {
		t.Errorf("the agent got %q; delegated requests %d, want one, named in the answer", a.Result, len(all))
	}
	if n := replayed(t, b, a.ID); n != 1 {
		t.Errorf("%d call_replayed records, want 1 (the call sent again)", n)
	}
	sentWithKey(t, c)
}
