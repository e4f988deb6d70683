package realcli_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/internal/realcli"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tlstest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
)

// The real CLIs hosted by a runner (docs/design.md §6): the bridge's agent
// "agent" is `kind: runner`; a runners.Runner in this process connects
// to the bridge over gRPC and runs the CLI as its child in its own
// workdir; the CLI reaches the bridge's tools only through the runner's
// localhost MCP proxy, with the runner's local token.

// runnerEnv is env whose agent is hosted by runner laptop.
type runnerEnv struct {
	*env
	workdir string // the runner's workdir of the agent
	logs    *syncbuf.Buffer
}

// newRunnerEnv starts the fake model of kind with script, a bridge (over
// TLS when secure) whose agent is hosted by runner laptop, and the runner
// with the real CLI.
func newRunnerEnv(t *testing.T, kind string, secure bool, script fakemodel.Script) *runnerEnv {
	t.Helper()
	bin := realcli.Bin(t, kind)
	e := &runnerEnv{env: &env{t: t, kind: kind, dir: t.TempDir(), home: t.TempDir()}, workdir: t.TempDir(), logs: &syncbuf.Buffer{}}
	rt := &process.Runtime{Kind: process.Kind(kind), Command: []string{bin}, Workdir: e.workdir, Home: e.home,
		Grace: 2 * time.Second, TurnTimeout: 2 * time.Minute}
	if kind == "claude" {
		e.model = fakemodel.Anthropic(t, script)
		rt.Env = realcli.ClaudeEnv(e.model.URL, 2)
	} else {
		e.model = fakemodel.OpenAI(t, script)
		if err := realcli.SetupCodex(e.home, e.model.URL, 1); err != nil {
			t.Fatal(err)
		}
		rt.Env = realcli.CodexEnv()
	}
	// The bridge builds its runtimes from config: demo is the test binary
	// in its helper mode; agent is the runner's.
	self, _ := json.Marshal([]string{"env", helperEnv + "=demo", "GORACE=atexit_sleep_ms=0", os.Args[0]})
	cfg := fmt.Sprintf(`
owner: acme
owners: [%s]
data_dir: %%DIR%%
rooms:
  - {name: main, channels: {console: main}, agents: [agent, demo], approvers: [%[1]s]}
agents:
  agent: {kind: runner, runner: laptop}
  demo: {kind: exec, command: %s}
runners: {grace: 30s, heartbeat: 1s}
`, owner, self)
	var tlsCfg *tls.Config
	if secure {
		f := tlstest.Write(t, e.dir)
		cfg += "http: {tls_cert_file: %DIR%/server.pem, tls_key_file: %DIR%/server.key}\n"
		tlsCfg = &tls.Config{RootCAs: f.Pool(t), MinVersion: tls.VersionTLS12}
	}
	e.b = coretest.Start(t, coretest.Options{Config: cfg, Dir: e.dir, Surfaces: []string{chat.Console}, HoldOutbox: true})
	tok, err := runners.Add(context.Background(), e.b.DB, time.Now(), "laptop")
	if err != nil {
		t.Fatal(err)
	}
	r, err := runners.NewRunner(runners.RunnerOptions{Name: "laptop", URLs: []string{e.b.URL}, Token: tok, TLS: tlsCfg,
		Agents: map[string]agents.Runtime{"agent": rt}, Workdirs: map[string]string{"agent": e.workdir},
		Retry: 20 * time.Millisecond, Log: slog.New(slog.NewTextHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("runner log:\n%s", e.logs.String())
		}
	})
	waitFor(t, "runner laptop to connect", func() bool {
		st, err := e.b.Runners().Statuses(context.Background())
		return err == nil && len(st) == 1 && st[0].Connected
	})
	return e
}

// cliSeen is what the runner's CLI process was seen with while it
// waited for the model.
type cliSeen struct {
	pid       int
	cmdline   []string
	mcpURL    string // the MCP endpoint the CLI was given
	mcpToken  string // the token it was given for it
	lookupErr string
}

// inspectCLI finds the CLI among this process's children (the runner
// runs in the test process) by its working directory, the runner's
// workdir, and reads the MCP endpoint and token it was given: Claude
// Code's from its --mcp-config file, Codex's from its -c override and
// environment. Linux (/proc).
func inspectCLI(workdir string) cliSeen {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return cliSeen{lookupErr: err.Error()}
	}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || ppid(pid) != os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != workdir {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		s := cliSeen{pid: pid, cmdline: strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")}
		s.mcpURL, s.mcpToken = mcpOf(pid, s.cmdline)
		return s
	}
	return cliSeen{lookupErr: "no child process of the test with cwd " + workdir}
}

// ppid is process pid's parent (0 if unknown).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces; it ends at the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// mcpOf is the MCP URL and token the CLI process pid was started with.
func mcpOf(pid int, argv []string) (url, token string) {
	for i, a := range argv {
		if a == "--mcp-config" && i+1 < len(argv) {
			var cfg struct {
				MCPServers map[string]struct {
					URL     string            `json:"url"`
					Headers map[string]string `json:"headers"`
				} `json:"mcpServers"`
			}
			b, _ := os.ReadFile(argv[i+1])
			_ = json.Unmarshal(b, &cfg)
			s := cfg.MCPServers[process.MCPServerName]
			return s.URL, strings.TrimPrefix(s.Headers["Authorization"], "Bearer ")
		}
		if v, ok := strings.CutPrefix(a, "mcp_servers."+process.MCPServerName+".url="); ok {
			url, _ = strconv.Unquote(v)
		}
	}
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, process.EnvMCPToken+"="); ok {
			token = v
		}
	}
	return url, token
}

// check asserts what the runner's CLI was seen with: a child of the
// runner, in the runner's workdir, talking to the runner's localhost
// proxy with a local token, never the bridge's URL or a bridge token.
func (e *runnerEnv) check(s *cliSeen) {
	e.t.Helper()
	switch {
	case runtime.GOOS != "linux":
		e.t.Log("not on Linux: the CLI's process (parent, cwd, MCP endpoint) is not checked")
		return
	case s == nil:
		e.t.Fatal("the CLI was never inspected")
	case s.lookupErr != "":
		e.t.Fatalf("the CLI process: %s", s.lookupErr)
	}
	if !strings.HasPrefix(s.mcpURL, "http://127.0.0.1:") || strings.Contains(s.mcpURL, strings.TrimPrefix(strings.TrimPrefix(e.b.URL, "https://"), "http://")) {
		e.t.Errorf("the CLI (pid %d, %q) was given MCP URL %q, want the runner's localhost proxy (the bridge is %s)", s.pid, s.cmdline, s.mcpURL, e.b.URL)
	}
	if !strings.HasPrefix(s.mcpToken, "rl_") {
		e.t.Errorf("the CLI was given MCP token %.8q…, want the runner's local token (rl_…)", s.mcpToken)
	}
}

// runnerScript is the model's side of a hosted turn: ask demo (ask_agent),
// then call tool (needing an answer of the room), then answer "waiting";
// once demo's answer arrives (the next turn), the final answer. The CLI
// is inspected at the first request of the agent's loop.
func runnerScript(e **runnerEnv, seen *atomic.Pointer[cliSeen], ask, tool fakemodel.Reply, toolID string) fakemodel.Script {
	return func(_ int, r fakemodel.Request) fakemodel.Reply {
		if isMain(r) && seen.Load() == nil {
			s := inspectCLI((*e).workdir)
			seen.Store(&s)
		}
		switch _, ok := r.ToolResult(); {
		case r.Has("answer of "):
			return fakemodel.Text("demo answered: final")
		case ok && r.Has(toolID):
			return fakemodel.Text("waiting for demo")
		case ok:
			return tool
		}
		return ask
	}
}

// hostedChecks asserts the end of a hosted turn: done with the model's
// final answer, once in the thread; demo asked on behalf of this request
// (the call reached the bridge with the turn's token).
func (e *runnerEnv) hostedChecks(id requests.ID, r *requests.Request) {
	e.t.Helper()
	if r.State != requests.Done || r.Result != "demo answered: final" {
		e.t.Fatalf("%s %s: result %q reason %q\nthread:\n%s", id, r.State, r.Result, r.Reason, e.thread(id))
	}
	// The call reached the bridge as this request's (the turn's token):
	// demo's request is delegated by it, and its ID came back to the CLI.
	demo := e.delegated(id)
	if d := e.get(demo); d.DelegatedBy != id || d.Agent != "demo" {
		e.t.Errorf("%s: agent %s delegated by %s, want demo by %s", demo, d.Agent, d.DelegatedBy, id)
	}
	back := false
	for _, m := range e.model.Requests() {
		if out, ok := m.ToolResult(); ok && strings.Contains(out, demo.String()) {
			back = true
		}
	}
	if !back {
		e.t.Errorf("no model call carries ask_agent's answer (%s)", demo)
	}
	if m := e.lastMain(); !m.Has("PONG") {
		e.t.Errorf("the last model call lacks demo's answer: %.400s", m.Body)
	}
	if n := strings.Count(e.thread(id), "demo answered: final"); n != 1 {
		e.t.Errorf("the final answer is %d times in the thread, want once:\n%s", n, e.thread(id))
	}
}

// approve approves the first approval of request id, failing at once if
// the request ends without asking.
func (e *runnerEnv) approve(id requests.ID) {
	e.t.Helper()
	waitFor(e.t, "approval "+id.String()+".1", func() bool {
		if r := e.get(id); r.State.Terminal() {
			e.t.Fatalf("%s ended %s before asking for approval: result %q reason %q\nthread:\n%s", id, r.State, r.Result, r.Reason, e.thread(id))
		}
		_, err := e.b.Approvals().Get(context.Background(), id.String()+".1")
		return err == nil
	})
	e.decide(id, 1, approvals.Approve)
}

// delegated is the request id's agent asked (its ask_agent audit record:
// "asked demo: ID (text)").
func (e *runnerEnv) delegated(id requests.ID) requests.ID {
	e.t.Helper()
	recs, err := audit.List(context.Background(), e.b.DB, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range recs {
		if f := strings.Fields(r.Detail); r.Action == "ask_agent" && len(f) >= 3 {
			d, err := requests.ParseID(f[2])
			if err != nil {
				e.t.Fatalf("ask_agent record %q: %v", r.Detail, err)
			}
			return d
		}
	}
	e.t.Fatal("the request's audit trail has no ask_agent: the call did not reach the bridge as this request's")
	return requests.ID{}
}

// TestClaudeOnRunner: Claude Code on a runner asks demo through the
// runner's MCP proxy, then runs Bash, whose permission prompt
// (approval_prompt, a call that waits for the room's answer) goes the
// same way; approved, the command runs in the runner's workdir; demo's
// answer brings the final answer, once.
func TestClaudeOnRunner(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			var e *runnerEnv
			var seen atomic.Pointer[cliSeen]
			ask := fakemodel.Call("toolu_ask", "mcp__roombridge__ask_agent", map[string]any{"agent": "demo", "text": "echo PONG"})
			bash := fakemodel.Call("toolu_bash", "Bash", map[string]any{"command": "echo ran > marker", "description": "write the marker"})
			e = newRunnerEnv(t, "claude", secure, runnerScript(&e, &seen, ask, bash, "toolu_bash"))
			id := e.ask("agent", "ask demo, then write the marker")
			e.approve(id)
			r := e.waitEnd(id)
			e.check(seen.Load())
			e.hostedChecks(id, r)
			if _, err := os.Stat(filepath.Join(e.workdir, "marker")); err != nil {
				t.Errorf("the approved command did not run in the runner's workdir: %v", err)
			}
		})
	}
}

// TestCodexOnRunner: Codex on a runner asks demo and calls
// request_approval (it waits for the room's decision) through the
// runner's MCP proxy; the approval's answer reaches Codex; demo's answer
// brings the final answer, once.
func TestCodexOnRunner(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			var e *runnerEnv
			var seen atomic.Pointer[cliSeen]
			ask := codexCall("call_ask", "ask_agent", map[string]any{"agent": "demo", "text": "echo PONG"})
			appr := codexCall("call_appr", "request_approval", map[string]any{"action": "deploy to staging"})
			e = newRunnerEnv(t, "codex", secure, runnerScript(&e, &seen, ask, appr, "call_appr"))
			id := e.ask("agent", "ask demo, then ask to deploy")
			e.approve(id)
			r := e.waitEnd(id)
			e.check(seen.Load())
			e.hostedChecks(id, r)
			// The approval's answer came back to Codex, in the model's next call.
			var answered bool
			for _, m := range e.model.Requests() {
				if out, ok := m.ToolResult(); ok && strings.Contains(out, `"approved":true`) {
					answered = true
				}
			}
			if !answered {
				t.Error("no model call carries request_approval's answer (approved)")
			}
		})
	}
}
