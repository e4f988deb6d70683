package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/delegation/mcptools"
	"github.com/roombridge/roombridge/requests"
)

// The test binary doubles as the agent processes the scheduler starts:
// MCPTOOLS_TEST_HELPER=demo is the demo agent (`bridge demo-agent`);
// fake-claude, fake-codex and fake-exec are agents that use the bridge's
// MCP tools the way the real CLIs do, from what their runtime hands them.
const helperEnv = "MCPTOOLS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "demo":
		os.Exit(demo.Main(os.Stdin, os.Stdout))
	case "fake-claude", "fake-codex", "fake-exec":
		if err := fakeAgent(os.Getenv(helperEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "fake agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper is the environment of a helper process (no second-long sleep at
// exit under -race).
func helper(mode string, env ...string) []string {
	return append([]string{helperEnv + "=" + mode, "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}, env...)
}

// run is what a fake agent records of one run (FAKE_RECORD, one JSON
// object per line).
type run struct {
	Argv []string `json:"argv"`
	// Config is the --mcp-config file (claude), ConfigMode its mode.
	Config     string `json:"config,omitempty"`
	ConfigMode string `json:"config_mode,omitempty"`
	// URL and Token are what the agent found to reach the MCP server.
	URL   string `json:"url"`
	Token string `json:"token"`
	// PromptTool and Allowed are claude's --permission-prompt-tool and
	// --allowedTools.
	PromptTool string `json:"prompt_tool,omitempty"`
	Allowed    string `json:"allowed,omitempty"`
}

// fakeAgent is one turn of a fake agent. On a turn whose input has an
// answer it answers "reviewer answered: <answer>". Otherwise it acts out
// FAKE_SCRIPT through the MCP tools: "ask" asks the reviewer (ask_agent)
// and ends its turn, "prompt" asks permission for a Bash command
// (approval_prompt) and answers with what it got.
func fakeAgent(mode string) error {
	rec := run{Argv: os.Args[1:]}
	prompt := ""
	switch mode {
	case "fake-claude":
		for i, a := range rec.Argv {
			next := ""
			if i+1 < len(rec.Argv) {
				next = rec.Argv[i+1]
			}
			switch a {
			case "-p":
				prompt = next
			case "--mcp-config":
				rec.Config = next
			case "--permission-prompt-tool":
				rec.PromptTool = next
			case "--allowedTools":
				rec.Allowed = next
			}
		}
		if rec.Config != "" {
			fi, err := os.Stat(rec.Config)
			if err != nil {
				return err
			}
			rec.ConfigMode = fmt.Sprintf("%04o", fi.Mode().Perm())
			b, err := os.ReadFile(rec.Config)
			if err != nil {
				return err
			}
			var cfg struct {
				MCPServers map[string]struct {
					Type    string            `json:"type"`
					URL     string            `json:"url"`
					Headers map[string]string `json:"headers"`
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				return err
			}
			srv := cfg.MCPServers["roombridge"]
			if srv.Type != "http" {
				return fmt.Errorf("server type %q", srv.Type)
			}
			rec.URL, rec.Token = srv.URL, strings.TrimPrefix(srv.Headers["Authorization"], "Bearer ")
		}
	case "fake-codex":
		// -c mcp_servers.roombridge.url="…" and bearer_token_env_var="…"
		urlRe := regexp.MustCompile(`^mcp_servers\.roombridge\.url="(.*)"$`)
		envRe := regexp.MustCompile(`^mcp_servers\.roombridge\.bearer_token_env_var="(.*)"$`)
		for i, a := range rec.Argv {
			if i > 0 && rec.Argv[i-1] == "-c" {
				if m := urlRe.FindStringSubmatch(a); m != nil {
					rec.URL = m[1]
				}
				if m := envRe.FindStringSubmatch(a); m != nil {
					rec.Token = os.Getenv(m[1])
				}
			}
		}
		prompt = rec.Argv[len(rec.Argv)-1]
	case "fake-exec":
		rec.URL, rec.Token = os.Getenv(process.EnvMCPURL), os.Getenv(process.EnvMCPToken)
		var turn process.TurnMessage
		line, err := bufio.NewReader(os.Stdin).ReadBytes('\n')
		if err != nil {
			return err
		}
		if err := json.Unmarshal(line, &turn); err != nil {
			return err
		}
		for _, in := range turn.Input {
			prompt += "\n" + in.Kind + ": " + in.Text
		}
	}
	b, _ := json.Marshal(rec)
	f, err := os.OpenFile(os.Getenv("FAKE_RECORD"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "%s\n", b)
	f.Close()

	var answer string
	yield := false
	switch _, after, found := strings.Cut(prompt, "answer"); {
	case found:
		// "--- answer of R… (done) ---\nlooks good" or "answer: looks good"
		after = strings.TrimSpace(after)
		answer = "reviewer answered: " + strings.TrimSpace(after[strings.LastIndexAny(after, "\n:")+1:])
	case os.Getenv("FAKE_SCRIPT") == "ask":
		res, err := callTool(rec.URL, rec.Token, "ask_agent", mcptools.AskAgentIn{Agent: "reviewer", Text: os.Getenv("FAKE_ASK")})
		if err != nil {
			return err
		}
		answer, yield = "asked the reviewer: "+textOf(res), true
	case os.Getenv("FAKE_SCRIPT") == "prompt":
		res, err := callTool(rec.URL, rec.Token, "approval_prompt", map[string]any{
			"tool_name": "Bash", "input": map[string]any{"command": "make deploy"}, "tool_use_id": "toolu_01"})
		if err != nil {
			return err
		}
		answer = textOf(res)
	}
	switch mode {
	case "fake-claude":
		fmt.Println(`{"type":"system","subtype":"init","session_id":"s-claude","mcp_servers":[{"name":"roombridge","status":"connected"}]}`)
		b, _ := json.Marshal(map[string]any{"type": "result", "subtype": "success", "is_error": false, "result": answer, "session_id": "s-claude"})
		fmt.Printf("%s\n", b)
	case "fake-codex":
		fmt.Println(`{"type":"thread.started","thread_id":"t-codex"}`)
		b, _ := json.Marshal(map[string]any{"type": "item.completed", "item": map[string]any{"id": "item_0", "type": "agent_message", "text": answer}})
		fmt.Printf("%s\n{\"type\":\"turn.completed\",\"usage\":{}}\n", b)
	case "fake-exec":
		ev := agents.TurnEvent{Type: agents.EventFinal, Text: answer}
		if yield {
			ev = agents.TurnEvent{Type: agents.EventYield, Reason: answer}
		}
		b, _ := json.Marshal(ev)
		fmt.Printf("%s\n", b)
		_, _ = io.Copy(io.Discard, os.Stdin) // the bridge closes stdin after the end
	}
	return nil
}

// callTool calls an MCP tool with the go-sdk client, as the CLI would.
func callTool(url, token, tool string, args any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "fake-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err == nil && res.IsError {
		err = errors.New(textOf(res))
	}
	return res, err
}

func textOf(res *mcp.CallToolResult) string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return strings.Join(out, "; ")
}

// fakeRuns reads the runs a fake agent recorded.
func fakeRuns(t *testing.T, path string) []run {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []run
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r run
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// fakeRuntime is the runtime of kind running the fake agent with script
// (and the environment extra).
func fakeRuntime(t *testing.T, kind, script, record string, extra ...string) agents.Runtime {
	env := helper("fake-"+kind, append([]string{"FAKE_SCRIPT=" + script, "FAKE_RECORD=" + record}, extra...)...)
	cmd, dir := []string{os.Args[0]}, t.TempDir()
	switch kind {
	case "claude":
		return &process.Runtime{Kind: process.Claude, Command: cmd, Env: env, Workdir: dir, Grace: time.Second}
	case "codex":
		return &process.Runtime{Kind: process.Codex, Command: cmd, Env: env, Workdir: dir, Grace: time.Second}
	}
	return &process.Runtime{Command: cmd, Env: env, Workdir: dir, Grace: time.Second}
}

// waitFor waits until cond holds for request id, re-checking on every
// change of a request.
func (e *env) waitFor(id requests.ID, what string, cond func(*requests.Request) bool) *requests.Request {
	e.t.Helper()
	wake, unsub := e.svc.Store().Subscribe(requests.TopicRequests)
	defer unsub()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		r, err := e.svc.Get(e.ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if cond(r) {
			return r
		}
		select {
		case <-wake:
		case <-deadline.C:
			e.t.Fatalf("%s: not %s within 30s: %s (reason %q, result %q)", id, what, r.State, r.Reason, r.Result)
		}
	}
}

func (e *env) ask(agent, text string) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: alice, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// refused checks that token gets a 401 from the MCP endpoint.
func (e *env) refused(token string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		e.t.Errorf("a token of an ended turn: status %d", resp.StatusCode)
	}
}

// TestCLIAgentDelegatesOverMCP: a claude, codex or exec agent gets the MCP
// URL and its turn's token from its runtime (claude: a 0600 --mcp-config
// file, removed after the turn; codex: -c overrides and the token in its
// environment only; exec: the environment), calls ask_agent with the go-sdk
// client and ends its turn. The delegated request runs; the asker waits
// (its answer-less final is not its answer) and its next turn gets the
// reviewer's real answer. Each turn's token dies with the turn.
func TestCLIAgentDelegatesOverMCP(t *testing.T) {
	for _, kind := range []string{"claude", "codex", "exec"} {
		t.Run(kind, func(t *testing.T) {
			record := filepath.Join(t.TempDir(), "record")
			gate := filepath.Join(t.TempDir(), "gate")
			reviewer := &process.Runtime{Command: []string{os.Args[0]}, Env: helper("demo"), Workdir: t.TempDir(), Grace: time.Second}
			e := newEnv(t, agents.Agent{Name: "coder", Runtime: fakeRuntime(t, kind, "ask", record, "FAKE_ASK=tool review "+gate+"; echo looks good")},
				agents.Agent{Name: "reviewer", Runtime: reviewer})
			e.start()
			ra := e.ask("coder", "get this reviewed")
			// The asker's turn ended, not the request: it waits on the
			// reviewer, who is held in its tool. The turn's token is dead
			// already, though its request runs.
			e.waitFor(ra.ID, "waiting", func(r *requests.Request) bool {
				return r.State == requests.Running && strings.HasPrefix(r.Activity, "waiting")
			})
			first := fakeRuns(t, record)[0]
			e.refused(first.Token)
			if kind == "claude" {
				if _, err := os.Stat(filepath.Dir(first.Config)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the MCP config is still there after the turn: %v", err)
				}
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			done := e.waitFor(ra.ID, "done", func(r *requests.Request) bool { return r.State.Terminal() })
			if done.State != requests.Done || done.Result != "reviewer answered: looks good" {
				t.Fatalf("asker %s: %q %q", done.State, done.Result, done.Reason)
			}
			rbs := e.delegatedBy(ra.ID)
			if len(rbs) != 1 || rbs[0].Agent != "reviewer" || rbs[0].State != requests.Done {
				t.Fatalf("delegated requests: %+v", rbs)
			}
			if rv, err := e.del.Get(e.ctx, rbs[0].ID); err != nil || rv.From != ra.ID || rv.State != delegation.Answered {
				t.Fatalf("rendezvous: %+v %v", rv, err)
			}
			if !hasAudit(t, e, ra.ID, "yield", "") {
				t.Error("the asker's first turn did not wait")
			}

			runs := fakeRuns(t, record)
			if len(runs) != 2 {
				t.Fatalf("%d turns of the asker, want 2: %+v", len(runs), runs)
			}
			if runs[0].Token == runs[1].Token {
				t.Error("both turns got the same token")
			}
			for i, r := range runs {
				if r.URL != e.url || !strings.HasPrefix(r.Token, "rbt_") {
					t.Errorf("turn %d: url %q (want %q), token %q…", i, r.URL, e.url, r.Token[:min(len(r.Token), 4)])
				}
				for _, a := range r.Argv {
					if strings.Contains(a, r.Token) {
						t.Errorf("turn %d: the token is in argv", i)
					}
				}
				e.refused(r.Token) // revoked when the turn ended
				if kind == "claude" {
					if r.ConfigMode != "0600" || r.PromptTool != "mcp__roombridge__approval_prompt" || r.Allowed != "mcp__roombridge" {
						t.Errorf("turn %d: config mode %s, prompt tool %q, allowed %q", i, r.ConfigMode, r.PromptTool, r.Allowed)
					}
					if _, err := os.Stat(filepath.Dir(r.Config)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("turn %d: the MCP config is still there: %v", i, err)
					}
				}
			}
		})
	}
}

// TestApprovalPrompt: Claude Code's permission prompt becomes an approval
// of the room, through the same path as request_approval; the room's
// decision is the answer Claude gets: allow with the input, or deny with
// who denied it.
func TestApprovalPrompt(t *testing.T) {
	for _, verdict := range []approvals.Verdict{approvals.Approve, approvals.Deny} {
		t.Run(string(verdict), func(t *testing.T) {
			record := filepath.Join(t.TempDir(), "record")
			e := newEnv(t, agents.Agent{Name: "coder", Runtime: fakeRuntime(t, "claude", "prompt", record)})
			e.start()
			r := e.ask("coder", "deploy it")
			deadline := time.Now().Add(30 * time.Second)
			for !hasAudit(t, e, r.ID, "approval_requested", `use Bash: {"command":"make deploy"}`) {
				if time.Now().After(deadline) {
					t.Fatal("no approval requested within 30s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if _, err := e.appr.Decide(e.ctx, r.ID.String()+".1", verdict, alice, chat.Console); err != nil {
				t.Fatal(err)
			}
			done := e.waitFor(r.ID, "done", func(r *requests.Request) bool { return r.State.Terminal() })
			var got mcptools.ApprovalPromptAnswer
			if err := json.Unmarshal([]byte(done.Result), &got); err != nil {
				t.Fatalf("%s, result %q: %v", done.State, done.Result, err)
			}
			want := mcptools.ApprovalPromptAnswer{Behavior: "allow", UpdatedInput: map[string]any{"command": "make deploy"}}
			if verdict == approvals.Deny {
				want = mcptools.ApprovalPromptAnswer{Behavior: "deny", Message: "not approved: denied by " + alice}
			}
			if got.Behavior != want.Behavior || got.Message != want.Message || fmt.Sprint(got.UpdatedInput) != fmt.Sprint(want.UpdatedInput) {
				t.Errorf("answer %+v, want %+v", got, want)
			}
			if runs := fakeRuns(t, record); len(runs) != 1 || !slices.Contains(runs[0].Argv, "--mcp-config") {
				t.Errorf("runs %+v", runs)
			}
		})
	}
}
