package realcli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/internal/realcli"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// The test binary doubles as the demo agent (REALCLI_HELPER=demo), the
// agent the CLIs delegate to.
const helperEnv = "REALCLI_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "demo" {
		os.Exit(demo.Main(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

const owner = "console:you"

// wait bounds every wait on a condition: a CLI turn takes about a second.
const wait = 60 * time.Second

// env is a whole bridge (coretest) whose agent "agent" is the real CLI of
// kind, its model API the fake, its home private; "demo" is the demo
// agent. Effects stay in the outbox, to be read.
type env struct {
	t     *testing.T
	kind  string
	dir   string
	home  string
	model *fakemodel.Server
	b     *coretest.Bridge
	extra []string
}

// newEnv starts the fake model API of kind with script, and the bridge.
// extra flags follow the CLI's binary in the agent's command.
func newEnv(t *testing.T, kind string, script fakemodel.Script, extra ...string) *env {
	t.Helper()
	bin := realcli.Bin(t, kind)
	e := &env{t: t, kind: kind, dir: t.TempDir(), home: t.TempDir(), extra: append([]string{bin}, extra...)}
	if kind == "claude" {
		e.model = fakemodel.Anthropic(t, script)
	} else {
		e.model = fakemodel.OpenAI(t, script)
		if err := realcli.SetupCodex(e.home, e.model.URL, 1); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	return e
}

func (e *env) config() string {
	cmd, _ := json.Marshal(e.extra)
	self, _ := json.Marshal([]string{os.Args[0]})
	return fmt.Sprintf(`
owner: acme
owners: [%s]
data_dir: %%DIR%%
rooms:
  - {name: main, channels: {console: main}, agents: [agent, demo]}
agents:
  agent: {kind: %s, command: %s, home: %q}
  demo: {kind: exec, command: %s}
`, owner, e.kind, cmd, e.home, self)
}

// start (re)starts the bridge on the env's data dir.
func (e *env) start() {
	b := coretest.Start(e.t, coretest.Options{Config: e.config(), Dir: e.dir, Surfaces: []string{chat.Console}, HoldOutbox: true,
		Runtimes: e.runtime})
	e.b = b
}

// workFile writes a file in the agent's workdir and returns its path.
func (e *env) workFile(name, content string) string {
	e.t.Helper()
	dir := filepath.Join(e.dir, "work", "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// runtime is core's runtime of a configured agent, with the test's
// environment: the CLI's fake model API, the demo agent's helper mode.
func (e *env) runtime(name string, a config.Agent) (agents.Runtime, error) {
	cmd := a.Command
	if rec := os.Getenv(realcli.RecordEnv); rec != "" && a.Kind != "exec" {
		var err error
		if cmd, err = realcli.Recorder(rec, e.t.TempDir(), a.Kind, e.t.Name(), cmd); err != nil {
			return nil, err
		}
	}
	rt := &process.Runtime{Kind: process.Kind(a.Kind), Command: cmd, Workdir: filepath.Join(e.dir, "work", name),
		Home: a.Home, Grace: 2 * time.Second, TurnTimeout: 2 * time.Minute}
	switch rt.Kind {
	case process.Claude:
		rt.Env = realcli.ClaudeEnv(e.model.URL, 2)
	case process.Codex:
		rt.Env = realcli.CodexEnv()
	default:
		rt.Env = []string{helperEnv + "=demo", "GORACE=atexit_sleep_ms=0"}
	}
	return rt, nil
}

// ask asks agent (as the owner: it runs at once).
func (e *env) ask(agent, text string) requests.ID {
	e.t.Helper()
	r, err := e.b.Requests().Create(context.Background(), requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: owner, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.ID
}

func (e *env) get(id requests.ID) *requests.Request {
	e.t.Helper()
	r, err := e.b.Requests().Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// waitFor waits until cond holds, up to the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitEnd waits for request id to end and returns it.
func (e *env) waitEnd(id requests.ID) *requests.Request {
	e.t.Helper()
	var r *requests.Request
	waitFor(e.t, id.String()+" to end", func() bool { r = e.get(id); return r.State.Terminal() })
	return r
}

// thread is the text of every message the outbox holds for request id's
// thread.
func (e *env) thread(id requests.ID) string {
	e.t.Helper()
	var b strings.Builder
	err := e.b.DB.View(context.Background(), func(tx store.Tx) error {
		pending, err := store.PendingEffects(tx, 0)
		for _, p := range pending {
			var ef threads.Effect
			if err := json.Unmarshal(p.Payload, &ef); err != nil {
				return err
			}
			if strings.Contains(string(p.Payload), id.String()) {
				b.WriteString(ef.Message.Text + "\n")
			}
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

// audited reports whether request id's audit trail has action.
func (e *env) audited(id requests.ID, action string) bool {
	e.t.Helper()
	recs, err := audit.List(context.Background(), e.b.DB, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action == action {
			return true
		}
	}
	return false
}

// decide decides the n-th permission request id's agent asked for.
func (e *env) decide(id requests.ID, n int, v approvals.Verdict) {
	e.t.Helper()
	aid := fmt.Sprintf("%s.%d", id, n)
	waitFor(e.t, "approval "+aid, func() bool {
		_, err := e.b.Approvals().Get(context.Background(), aid)
		return err == nil
	})
	if _, err := e.b.Approvals().Decide(context.Background(), aid, v, owner, chat.Console); err != nil {
		e.t.Fatal(err)
	}
}

// isMain reports whether r is a request of the agent's own loop (not a
// side call the CLI makes without tools: a title, a summary).
func isMain(r fakemodel.Request) bool { return len(r.ToolNames()) > 0 }

// lastMain is the last main-loop request the model got.
func (e *env) lastMain() fakemodel.Request {
	e.t.Helper()
	reqs := e.model.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if isMain(reqs[i]) {
			return reqs[i]
		}
	}
	e.t.Fatal("the model got no request")
	return fakemodel.Request{}
}

// apiErrorCase is one way the model API fails (TestClaudeModelAPIErrors,
// TestCodexModelAPIErrors).
type apiErrorCase struct {
	name  string
	first fakemodel.Reply
	// fails: the request fails with a reason holding each of these; else
	// it is done after a retry shown in the status line.
	fails []string
	// times the first reply is given before the model recovers.
	times int
}

// runAPIErrors runs each case with the CLI of kind: the model answers
// c.first (c.times times, or always when the request must fail), then
// "recovered" once the retry shows in the request's status.
func runAPIErrors(t *testing.T, kind string, cases []apiErrorCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var id atomic.Value
			var shown atomic.Value
			var e *env
			e = newEnv(t, kind, func(n int, r fakemodel.Request) fakemodel.Reply {
				if n < max(c.times, 1) || c.fails != nil {
					return c.first
				}
				// The retry is in the thread's status before it is sent.
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					if a := e.get(id.Load().(requests.ID)).Activity; strings.Contains(a, "retry 1") {
						shown.Store(a)
						break
					}
					time.Sleep(10 * time.Millisecond) // polling the store for the condition, with a deadline
				}
				return fakemodel.Text("recovered")
			})
			id.Store(e.ask("agent", "hello"))
			r := e.waitEnd(id.Load().(requests.ID))
			if c.fails == nil {
				if r.State != requests.Done || r.Result != "recovered" {
					t.Fatalf("%s: result %q reason %q", r.State, r.Result, r.Reason)
				}
				if shown.Load() == nil {
					t.Error("the retry was not shown in the status line")
				}
				return
			}
			if r.State != requests.Failed {
				t.Fatalf("%s, want failed (result %q)", r.State, r.Result)
			}
			for _, s := range c.fails {
				if !strings.Contains(r.Reason, s) {
					t.Errorf("reason %q lacks %q", r.Reason, s)
				}
			}
			if c.name == "401" && len(e.model.Requests()) > 1 {
				t.Errorf("an authentication failure was retried: %d model requests", len(e.model.Requests()))
			}
		})
	}
}
