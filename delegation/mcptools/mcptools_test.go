package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/delegation/mcptools"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

const alice = "console:alice" // an owner: her asks are approved at once

// env is the real core on a real bolt file, with the delegation and
// approvals services, the scheduler (its call dispatcher serves the tools)
// and the MCP server on a test HTTP server. The scheduler runs the given
// agents only after start; without it, requests are started by hand, as a
// turn would be.
type env struct {
	t     *testing.T
	ctx   context.Context
	svc   *requests.Service
	del   *delegation.Service
	appr  *approvals.Service
	sched *agents.Scheduler
	mcp   *mcptools.Server
	url   string
}

func newEnv(t *testing.T, ags ...agents.Agent) *env {
	t.Helper()
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	rs := []config.Room{{Name: "main", Console: true, Agents: []string{"coder", "reviewer"}}}
	svc := requests.NewService(db, clock.Real{}, "acme", []string{alice})
	roomDir := directory.New(rs, []string{alice}, chat.Console)
	th := threads.New(roomDir)
	svc.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, TTL: time.Hour, Threads: th})
	svc.AddObserver(approvals.ObserverName, appr.Observe)
	del := delegation.New(delegation.Options{Requests: svc, Agents: []string{"coder", "reviewer"}, Workdir: dir, Threads: th})
	svc.AddObserver("delegation", del.Observe)
	t.Cleanup(del.Wait)
	sched := agents.NewScheduler(svc, th, nil, ags...)
	sched.Approver, sched.Delegator = appr, del
	sched.Tasks = mcptools.Tasks{Requests: svc, Delegation: del}
	m := mcptools.New(mcptools.Options{Requests: svc, Calls: sched})
	hs := httptest.NewServer(m)
	t.Cleanup(hs.Close)
	sched.Tools, sched.MCPURL = m, mcptools.URL("http", hs.Listener.Addr().String())
	return &env{t: t, ctx: context.Background(), svc: svc, del: del, appr: appr, sched: sched, mcp: m, url: sched.MCPURL}
}

// start runs the scheduler until the test ends.
func (e *env) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.sched.Run(ctx)
	}()
	e.t.Cleanup(func() { cancel(); <-done })
}

// running creates a request for agent and starts it, as a turn would.
func (e *env) running(agent, text string) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: alice, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	r, err = e.svc.Apply(e.ctx, r.ID, requests.Change{Event: requests.Start, Actor: "system:test"})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) issue(id requests.ID) (string, func()) {
	e.t.Helper()
	tok, revoke, err := e.mcp.Issue(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok, revoke
}

// bearerTransport adds the per-turn token to every HTTP request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session with the go-sdk client, sending token.
func (e *env) connect(token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	return c.Connect(e.ctx, &mcp.StreamableClientTransport{Endpoint: e.url, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
}

func (e *env) session(token string) *mcp.ClientSession {
	e.t.Helper()
	cs, err := e.connect(token)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls tool and returns its structured output decoded into out, or
// the tool's error text.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args, out any) error {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err
	}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, tc.Text)
			}
		}
		return errors.New(strings.Join(msg, "; "))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return json.Unmarshal(b, out)
}

func (e *env) delegatedBy(ra requests.ID) []*requests.Request {
	e.t.Helper()
	all, err := e.svc.List(e.ctx, requests.Filter{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*requests.Request
	for _, r := range all {
		if r.DelegatedBy == ra {
			out = append(out, r)
		}
	}
	return out
}

func TestAskAgentWithToken(t *testing.T) {
	e := newEnv(t)
	ra := e.running("coder", "review my change")
	tok, revoke := e.issue(ra.ID)
	cs := e.session(tok)

	tools, err := cs.ListTools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "approval_prompt,ask_agent,ask_user,background_run,report_progress,request_approval,task_status" {
		t.Fatalf("tools: %s", got)
	}

	var out mcptools.AskAgentOut
	if err := call(t, cs, "ask_agent", mcptools.AskAgentIn{Agent: "reviewer", Text: "please review"}, &out); err != nil {
		t.Fatal(err)
	}
	rbs := e.delegatedBy(ra.ID)
	if len(rbs) != 1 || rbs[0].ID.String() != out.RequestID || rbs[0].Agent != "reviewer" || rbs[0].Ask != "please review" {
		t.Fatalf("delegated requests of %s: %+v (answer %q)", ra.ID, rbs, out.RequestID)
	}
	rv, err := e.del.Get(e.ctx, rbs[0].ID)
	if err != nil || rv.From != ra.ID || rv.State != delegation.Open {
		t.Fatalf("rendezvous: %+v, %v", rv, err)
	}

	// Bad input: refused with a clear error, nothing created.
	if err := call(t, cs, "ask_agent", mcptools.AskAgentIn{Agent: "nobody", Text: "x"}, &out); err == nil {
		t.Fatal("ask_agent of an unknown agent succeeded")
	}
	if n := len(e.delegatedBy(ra.ID)); n != 1 {
		t.Fatalf("%d delegated requests after a refused ask", n)
	}

	// report_progress lands on the token's request.
	var ok mcptools.ReportProgressOut
	if err := call(t, cs, "report_progress", mcptools.ReportProgressIn{Percent: 40, Text: "reading"}, &ok); err != nil || !ok.OK {
		t.Fatalf("report_progress: %v %+v", err, ok)
	}
	if r, _ := e.svc.Get(e.ctx, ra.ID); r.Progress != 40 || r.Activity != "reading" {
		t.Fatalf("progress not recorded: %d %q", r.Progress, r.Activity)
	}
	if err := call(t, cs, "report_progress", mcptools.ReportProgressIn{Percent: 140}, &ok); err == nil || !strings.Contains(err.Error(), "outside 0-100") {
		t.Fatalf("report_progress 140: %v", err)
	}
	if r, _ := e.svc.Get(e.ctx, ra.ID); r.Progress != 40 {
		t.Fatalf("a refused progress changed the request: %d", r.Progress)
	}
	if !hasAudit(t, e, ra.ID, "call_refused", "outside 0-100") {
		t.Fatal("refused progress not audited")
	}

	// Revoked at turn end: the same session is refused from then on.
	revoke()
	if err := call(t, cs, "report_progress", mcptools.ReportProgressIn{Percent: 50}, &ok); err == nil {
		t.Fatal("a revoked token still works")
	}
	if r, _ := e.svc.Get(e.ctx, ra.ID); r.Progress != 40 {
		t.Fatalf("a revoked token changed the request: %d", r.Progress)
	}
}

func hasAudit(t *testing.T, e *env, id requests.ID, action, detail string) bool {
	t.Helper()
	found := false
	err := audit.Each(e.ctx, e.svc.Store(), audit.Query{}, func(r *audit.Record) error {
		rid := ""
		if id != (requests.ID{}) {
			rid = id.String()
		}
		if r.RequestID == rid && r.Action == action && strings.Contains(r.Detail, detail) {
			found = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestNoOrWrongTokenRefused(t *testing.T) {
	e := newEnv(t)
	ra := e.running("coder", "x")
	good, _ := e.issue(ra.ID)
	for name, tok := range map[string]string{"none": "", "wrong": "rbt_" + strings.Repeat("0", 64), "mangled": good + "x"} {
		t.Run(name, func(t *testing.T) {
			// Raw HTTP: 401 with a JSON error.
			req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var msg struct{ Error string }
			if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &msg) != nil || msg.Error == "" {
				t.Fatalf("status %d body %s", resp.StatusCode, body)
			}
			// The go-sdk client cannot even connect.
			if cs, err := e.connect(tok); err == nil {
				_ = cs.Close()
				t.Fatal("connected without a valid token")
			}
		})
	}
	if n := len(e.delegatedBy(ra.ID)); n != 0 {
		t.Fatalf("%d delegated requests", n)
	}
	if !hasAudit(t, e, requests.ID{}, "auth_refused", "POST /mcp") {
		t.Fatal("refused MCP requests not audited")
	}
}

// A token never revoked (the bridge was killed mid-turn) dies with its
// request.
func TestTokenOfEndedRequestRefused(t *testing.T) {
	e := newEnv(t)
	ra := e.running("coder", "x")
	tok, _ := e.issue(ra.ID)
	if _, err := e.mcp.Resolve(e.ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Apply(e.ctx, ra.ID, requests.Change{Event: requests.Finish, Actor: "system:test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mcp.Resolve(e.ctx, tok); !errors.Is(err, mcptools.ErrUnauthorized) {
		t.Fatalf("token of a finished request: %v", err)
	}
	if cs, err := e.connect(tok); err == nil {
		_ = cs.Close()
		t.Fatal("connected with the token of a finished request")
	}
}

func TestTokenBindsToItsRequest(t *testing.T) {
	e := newEnv(t)
	rx := e.running("coder", "x")
	ry := e.running("reviewer", "y")
	tokX, _ := e.issue(rx.ID)
	tokY, _ := e.issue(ry.ID)
	csX := e.session(tokX)

	// X's token acts on X only, whatever the call says.
	var out mcptools.AskAgentOut
	if err := call(t, csX, "ask_agent", mcptools.AskAgentIn{Agent: "reviewer", Text: "from x"}, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(e.delegatedBy(ry.ID)); n != 0 {
		t.Fatalf("X's token delegated on behalf of Y: %d", n)
	}
	if rbs := e.delegatedBy(rx.ID); len(rbs) != 1 || rbs[0].ID.String() != out.RequestID {
		t.Fatalf("delegated by X: %+v", rbs)
	}
	var ok mcptools.ReportProgressOut
	if err := call(t, csX, "report_progress", mcptools.ReportProgressIn{Percent: 10, Text: "x"}, &ok); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.svc.Get(e.ctx, ry.ID); r.Progress != 0 || r.Activity != "" {
		t.Fatalf("X's token changed Y: %d %q", r.Progress, r.Activity)
	}

	// A task of Y is invisible through X's token.
	csY := e.session(tokY)
	var task mcptools.BackgroundRunOut
	if err := call(t, csY, "background_run", mcptools.BackgroundRunIn{Name: "t", Command: []string{"true"}}, &task); err != nil {
		t.Fatal(err)
	}
	var st mcptools.TaskStatusOut
	if err := call(t, csX, "task_status", mcptools.TaskStatusIn(task), &st); err == nil {
		t.Fatalf("X read Y's task: %+v", st)
	}
	if err := call(t, csY, "task_status", mcptools.TaskStatusIn(task), &st); err != nil || st.TaskID != task.TaskID {
		t.Fatalf("Y's task_status: %v %+v", err, st)
	}
}

// TestCloseEndsWaitingCalls: a call waiting for people (request_approval)
// ends when the Server is closed (the bridge stops: an HTTP server's
// shutdown waits for its handlers, and this one could wait for a day), and
// later calls are refused at once; the approval stays pending in the store.
func TestCloseEndsWaitingCalls(t *testing.T) {
	e := newEnv(t)
	ra := e.running("coder", "deploy")
	tok, _ := e.issue(ra.ID)
	cs := e.session(tok)
	ended := make(chan error, 1)
	go func() {
		var out mcptools.RequestApprovalOut
		ended <- call(t, cs, "request_approval", mcptools.RequestApprovalIn{Action: "deploy to prod"}, &out)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := e.appr.Inbox(e.ctx, "main")
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no approval pending 10 s after the call")
		}
		time.Sleep(5 * time.Millisecond) // polling the store for the condition, with a deadline
	}
	select {
	case err := <-ended:
		t.Fatalf("the call ended before Close: %v", err)
	default:
	}
	e.mcp.Close()
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "stopping") {
			t.Errorf("the waiting call ended with %v, want an error saying the bridge is stopping (not a denial)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call still runs 10 s after Close")
	}
	var out mcptools.ReportProgressOut
	if err := call(t, cs, "report_progress", mcptools.ReportProgressIn{Percent: 5, Text: "x"}, &out); err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Errorf("a call after Close: %v, want a refusal saying the bridge is stopping", err)
	}
	if in, err := e.appr.Inbox(e.ctx, "main"); err != nil || len(in.Items) != 1 {
		t.Errorf("inbox after Close: %+v (%v), want the approval still pending", in, err)
	}
}
