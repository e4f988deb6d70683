package agents_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
)

// fakeCLIRun is a fake `claude` or `codex`: the test binary replaying a
// fixture (see fakeCLI in main_test.go), with its record file.
type fakeCLIRun struct {
	t      *testing.T
	record string
}

func newFakeCLI(t *testing.T) *fakeCLIRun {
	return &fakeCLIRun{t: t, record: filepath.Join(t.TempDir(), "record")}
}

// env is the fake's environment replaying fixture (under testdata/).
func (f *fakeCLIRun) env(fixture string, extra ...string) []string {
	f.t.Helper()
	path := ""
	if fixture != "" {
		var err error
		if path, err = filepath.Abs(filepath.Join("..", "testdata", fixture)); err != nil {
			f.t.Fatal(err)
		}
	}
	return helper("fake-cli", append([]string{"FAKE_CLI_FIXTURE=" + path, "FAKE_CLI_RECORD=" + f.record}, extra...)...)
}

// lines returns what the fake recorded: "argv [...]", "printed tool start
// N", "sigint".
func (f *fakeCLIRun) lines() []string {
	b, _ := os.ReadFile(f.record)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// argvs returns the argument lists of every run of the fake.
func (f *fakeCLIRun) argvs() [][]string {
	var out [][]string
	for _, l := range f.lines() {
		if rest, ok := strings.CutPrefix(l, "argv "); ok {
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				f.t.Fatal(err)
			}
			out = append(out, argv)
		}
	}
	return out
}

const (
	claudeToolsSession = "a1dcb8fd-32db-4037-86e1-283ce8a2465c"
	claudeResumed      = "90e4ba3c-4e5a-403d-89dc-632d156e38ee"
	codexToolsThread   = "019a3c61-02f8-7a93-8b55-c0d7e1f49a26"
	codexSimpleThread  = "019a3c5e-7d21-7b40-9c1e-5f2a8e4d6b13"
)

// TestClaudeTurn: a turn of Claude Code in print mode: the command line, the
// session from the init event, and the result event as the final answer.
func TestClaudeTurn(t *testing.T) {
	e := newEnv(t)
	f := newFakeCLI(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: &process.Runtime{Kind: process.Claude, Command: demoCommand(), Env: f.env("claude/tools.jsonl")}})
	r := e.ask(alice, "coder", "do the parser tests pass?")
	got := e.waitState(r.ID, requests.Done)
	if got.Session != claudeToolsSession || !strings.HasPrefix(got.Result, "The parser tests pass") {
		t.Errorf("session %q, result %q", got.Session, got.Result)
	}
	argv := f.argvs()
	if len(argv) != 1 {
		t.Fatalf("%d runs, want 1", len(argv))
	}
	want := []string{"-p", process.Prompt(agents.Turn{RequestID: r.ID.String(),
		Input: []agents.Input{{Kind: agents.InputAsk, Text: "do the parser tests pass?", RequestID: r.ID.String()}}}),
		"--output-format", "stream-json", "--verbose"}
	if !slices.Equal(argv[0], want) {
		t.Errorf("argv %q\nwant %q", argv[0], want)
	}
	if !e.hasAudit(r.ID, "session", claudeToolsSession) {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
}

// TestClaudeResume: after a restart in the middle of a turn, Claude Code is
// resumed with --resume=<the stored session>, and the session the CLI
// reports then replaces the stored one.
func TestClaudeResume(t *testing.T) {
	e := newEnv(t)
	f := newFakeCLI(t)
	gate := filepath.Join(t.TempDir(), "never")
	e.start(nil, agents.Agent{Name: "coder", Runtime: &process.Runtime{Kind: process.Claude, Command: demoCommand(),
		Env: f.env("claude/tools.jsonl", "FAKE_CLI_GATE="+gate)}})
	r := e.ask(alice, "coder", "run the tests")
	e.waitFor(r.ID, "in its Bash tool", func(r *requests.Request) bool { return r.Activity == "Bash" })
	e.stopScheduler() // SIGINT: the fake exits
	e.start(nil, agents.Agent{Name: "coder", Runtime: &process.Runtime{Kind: process.Claude, Command: demoCommand(), Env: f.env("claude/resume.jsonl")}})
	got := e.waitState(r.ID, requests.Done)
	argv := f.argvs()
	if len(argv) != 2 || !slices.Contains(argv[1], "--resume="+claudeToolsSession) || slices.Contains(argv[0], "--resume="+claudeToolsSession) {
		t.Fatalf("argv of the two runs: %q", argv)
	}
	if !strings.Contains(argv[1][1], "The bridge restarted") {
		t.Errorf("the resumed prompt does not say so: %q", argv[1][1])
	}
	if got.Session != claudeResumed || !strings.HasPrefix(got.Result, "It is `example.com/demo`") {
		t.Errorf("session %q, result %q", got.Session, got.Result)
	}
	if !e.hasAudit(r.ID, "resume", "resumed with session "+claudeToolsSession) {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
}

// TestCLICancel: a cancel while a CLI agent runs a tool: SIGINT comes after
// the tool's result (the safe point), no second tool starts, and the
// request ends cancelled with what was done.
func TestCLICancel(t *testing.T) {
	for _, c := range []struct {
		name, fixture string
		runtime       func(env []string) agents.Runtime
		tool, ran     string
	}{
		{"claude", "claude/tools.jsonl", func(env []string) agents.Runtime {
			return &process.Runtime{Kind: process.Claude, Command: demoCommand(), Env: env, Grace: 2 * time.Second}
		}, "Bash", "ran Bash"},
		{"codex", "codex/tools.jsonl", func(env []string) agents.Runtime {
			return &process.Runtime{Kind: process.Codex, Command: demoCommand(), Env: env, Grace: 2 * time.Second}
		}, "shell: bash -lc 'go test ./internal/parser/...'", "ran shell: bash -lc 'go test ./internal/parser/...'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			f := newFakeCLI(t)
			gate := filepath.Join(t.TempDir(), "gate")
			e.start(nil, agents.Agent{Name: "coder", Runtime: c.runtime(f.env(c.fixture, "FAKE_CLI_GATE="+gate))})
			r := e.ask(alice, "coder", "run the tests")
			e.waitFor(r.ID, "in its first tool", func(r *requests.Request) bool { return r.Activity == c.tool })
			if _, err := e.router.Cancel(e.ctx, r.ID, alice, chat.Console); err != nil {
				t.Fatal(err)
			}
			e.waitFor(r.ID, "cancelling", func(r *requests.Request) bool { return r.CancelRequested })
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			got := e.waitState(r.ID, requests.Cancelled)
			lines := f.lines()
			if !slices.Contains(lines, "printed tool end 1") || !slices.Contains(lines, "sigint") || slices.Contains(lines, "printed tool start 2") {
				t.Errorf("fake CLI: %q", lines)
			}
			if !strings.HasPrefix(got.Result, c.ran) {
				t.Errorf("result %q, want %q", got.Result, c.ran)
			}
			if fin := e.finals(r.ID); len(fin) != 1 || !strings.Contains(fin[0], "incomplete — done so far: "+c.ran) {
				t.Errorf("thread outcome %q", fin)
			}
		})
	}
}

// TestCLIFailures: failures of the CLIs end the request failed with their
// message: error results, failed turns, and startup errors on stderr.
func TestCLIFailures(t *testing.T) {
	e := newEnv(t)
	claude := func(fixture string, extra ...string) agents.Runtime {
		return &process.Runtime{Kind: process.Claude, Command: demoCommand(), Env: newFakeCLI(t).env(fixture, extra...)}
	}
	codex := func(fixture string, extra ...string) agents.Runtime {
		return &process.Runtime{Kind: process.Codex, Command: demoCommand(), Env: newFakeCLI(t).env(fixture, extra...)}
	}
	cases := []struct {
		rt     agents.Runtime
		reason string
	}{
		{claude("claude/error.jsonl", "FAKE_CLI_EXIT=1"), `agent reported: claude: API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{claude("claude/error_api.jsonl", "FAKE_CLI_EXIT=1"), "agent reported: claude: Invalid API key · Fix external API key"},
		{claude("", "FAKE_CLI_EXIT=1", "FAKE_CLI_STDERR=Error: When using --print, --output-format=stream-json requires --verbose"),
			"agent exited without a final answer (exit status 1) (stderr: Error: When using --print, --output-format=stream-json requires --verbose)"},
		// Issue 16: an authentication failure fails the turn at once, read
		// out of the message, naming the agent and where its credentials
		// come from.
		{codex("codex/failed.jsonl", "FAKE_CLI_EXIT=1"), "agent reported: codex: model API: 401 Incorrect API key provided: the credentials of agent agentd were refused; " +
			"they come from the model provider's env_key (OPENAI_API_KEY by default) in the agent's environment, or the login in $CODEX_HOME (~/.codex)/auth.json"},
		{codex("", "FAKE_CLI_EXIT=1", "FAKE_CLI_STDERR=Not inside a trusted directory and --skip-git-repo-check was not specified."),
			"agent exited without a final answer (exit status 1) (stderr: Not inside a trusted directory and --skip-git-repo-check was not specified.)"},
	}
	var ags []agents.Agent
	var ids []requests.ID
	for i, c := range cases {
		name := "agent" + string(rune('a'+i))
		ags = append(ags, agents.Agent{Name: name, Runtime: c.rt})
		ids = append(ids, e.ask(alice, name, "hello").ID)
	}
	e.start(nil, ags...)
	for i, c := range cases {
		got := e.waitState(ids[i], requests.Failed)
		if got.Reason != c.reason {
			t.Errorf("reason %q\nwant   %q", got.Reason, c.reason)
		}
		if !e.hasAudit(ids[i], "fail", c.reason) {
			t.Errorf("audit:\n%s", e.auditText(ids[i]))
		}
	}
}

// TestCodexTurn: a turn of codex exec --json: its command line (stdin is
// not a pipe, the git check is off), the thread ID as the session, the last
// agent message as the answer; and resume by `exec resume <thread>`.
func TestCodexTurn(t *testing.T) {
	e := newEnv(t)
	f := newFakeCLI(t)
	gate := filepath.Join(t.TempDir(), "never")
	e.start(nil, agents.Agent{Name: "coder", Runtime: &process.Runtime{Kind: process.Codex, Command: append(demoCommand(), "--sandbox", "workspace-write"),
		Env: f.env("codex/tools.jsonl", "FAKE_CLI_GATE="+gate)}})
	r := e.ask(alice, "coder", "run the tests")
	e.waitFor(r.ID, "in its first tool", func(r *requests.Request) bool { return strings.HasPrefix(r.Activity, "shell: ") })
	e.stopScheduler()
	e.start(nil, agents.Agent{Name: "coder", Runtime: &process.Runtime{Kind: process.Codex, Command: append(demoCommand(), "--sandbox", "workspace-write"),
		Env: f.env("codex/simple.jsonl")}})
	got := e.waitState(r.ID, requests.Done)
	argv := f.argvs()
	if len(argv) != 2 {
		t.Fatalf("%d runs", len(argv))
	}
	if want := []string{"exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write"}; !slices.Equal(argv[0][:5], want) || len(argv[0]) != 6 {
		t.Errorf("first run argv %q", argv[0])
	}
	if want := []string{"resume", codexToolsThread}; !slices.Equal(argv[1][5:7], want) {
		t.Errorf("resumed run argv %q", argv[1])
	}
	if got.Session != codexSimpleThread || got.Result != "The module path is `example.com/demo` (first line of `go.mod`)." {
		t.Errorf("session %q, result %q", got.Session, got.Result)
	}
}
