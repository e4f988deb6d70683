package agents_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/threads"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The test binary doubles as the agent processes the tests start:
// AGENTS_TEST_HELPER=demo makes it the demo agent (as `bridge demo-agent`),
// =fake-cli a fake `claude` or `codex` that replays a recorded stream.
const helperEnv = "AGENTS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "demo":
		os.Exit(demo.Main(os.Stdin, os.Stdout))
	case "fake-cli":
		os.Exit(fakeCLI())
	}
	os.Exit(m.Run())
}

// demoCommand is the command of an exec agent that is the demo agent.
func demoCommand() []string { return []string{os.Args[0]} }

// helper returns the environment of a helper process: mode, and no
// second-long sleep at exit when the tests run with -race.
func helper(mode string, env ...string) []string {
	return append([]string{helperEnv + "=" + mode, "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}, env...)
}

// fakeCLI replays the file FAKE_CLI_FIXTURE on stdout, one line at a time,
// as `claude -p ... --output-format stream-json` or `codex exec --json`
// would print it. It appends its argv (and later "sigint" or "printed
// LINE-KIND") to FAKE_CLI_RECORD. With FAKE_CLI_GATE set, it stops after the
// first tool start until that file exists, and after the tool's end it waits
// (up to 30 s) for SIGINT before printing anything more: a cancel at that
// safe point stops it before a second tool starts. It writes
// FAKE_CLI_STDERR to stderr and exits with FAKE_CLI_EXIT.
func fakeCLI() int {
	record := func(format string, args ...any) {
		f, err := os.OpenFile(os.Getenv("FAKE_CLI_RECORD"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return
		}
		defer f.Close()
		fmt.Fprintf(f, format+"\n", args...)
	}
	argv, _ := json.Marshal(os.Args[1:])
	record("argv %s", argv)
	sigint := make(chan os.Signal, 1)
	signal.Notify(sigint, syscall.SIGINT)
	if s := os.Getenv("FAKE_CLI_STDERR"); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
	gate := os.Getenv("FAKE_CLI_GATE")
	data, err := os.ReadFile(os.Getenv("FAKE_CLI_FIXTURE"))
	if err != nil && os.Getenv("FAKE_CLI_FIXTURE") != "" {
		fmt.Fprintln(os.Stderr, "fake-cli:", err)
		return 2
	}
	waitSigint := func(limit time.Duration) bool {
		select {
		case <-sigint:
			record("sigint")
			return true
		case <-time.After(limit):
			return false
		}
	}
	tools := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		start := strings.Contains(line, `"type":"tool_use"`) || strings.Contains(line, `"type":"item.started"`)
		end := strings.Contains(line, `"type":"tool_result"`) ||
			(strings.Contains(line, `"type":"item.completed"`) && strings.Contains(line, `"type":"command_execution"`))
		if waitSigint(0) {
			return 1
		}
		fmt.Println(line)
		switch {
		case start:
			tools++
			record("printed tool start %d", tools)
			if gate != "" && tools == 1 {
				for {
					if _, err := os.Stat(gate); err == nil {
						break
					}
					if waitSigint(5 * time.Millisecond) {
						return 1
					}
				}
			}
		case end:
			record("printed tool end %d", tools)
			if gate != "" && tools == 1 && waitSigint(30*time.Second) {
				return 1 // codex exec: interrupted, no turn.* line, exit 1
			}
		}
	}
	code := 0
	fmt.Sscan(os.Getenv("FAKE_CLI_EXIT"), &code)
	return code
}

// testRoom is the one room of the tests: on the console, asked by owners.
const (
	alice = "console:alice" // an owner: her asks are approved at once
	bob   = "console:bob"   // a member
)

// env is the real core on a real bolt file: requests, threads (effects stay
// in the outbox, to be inspected), approvals, the router and the scheduler
// running the given agents.
type env struct {
	t      *testing.T
	ctx    context.Context
	db     store.Store
	path   string
	etcd   *clientv3.Client // set: the store is etcd (newEtcdEnv), else bolt
	maxTxn int              // etcd's max bytes of one transaction (0: default)
	slog   *slog.Logger     // the scheduler's log (nil: none)
	svc    *requests.Service
	th     *threads.Threads
	appr   *approvals.Service
	router *rooms.Router
	log    string // the demo agents' log (DEMO_AGENT_LOG)

	mu   sync.Mutex
	stop func()
}

func newEnv(t *testing.T) *env { return newEnvOn(t, nil, 0) }

// newEnvOn is newEnv on the etcd of cli (nil: bolt), whose transactions
// hold at most maxTxn bytes (0: the store's default).
func newEnvOn(t *testing.T, cli *clientv3.Client, maxTxn int) *env {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{t: t, ctx: ctx, path: filepath.Join(dir, "bridge.db"), log: filepath.Join(dir, "demo.log"), etcd: cli, maxTxn: maxTxn}
	e.open()
	t.Cleanup(func() {
		cancel()
		e.stopScheduler()
		_ = e.db.Close()
	})
	return e
}

// open opens the store and builds the core on it (again after close: a
// restart).
func (e *env) open() {
	var db store.Store
	var err error
	if e.etcd != nil {
		db, err = etcd.New(e.etcd, etcd.Options{Prefix: "/agents", Timeout: 300 * time.Millisecond, MaxTxnBytes: e.maxTxn})
	} else {
		db, err = bolt.Open(e.path)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	rs := []config.Room{{Name: "main", Console: true, Agents: []string{"coder", "reviewer"}, Members: []string{bob}}}
	e.db = db
	e.svc = requests.NewService(db, clock.Real{}, "acme", []string{alice})
	roomDir := directory.New(rs, []string{alice}, chat.Console)
	e.th = threads.New(roomDir)
	e.svc.AddObserver("threads", e.th.Observe)
	e.appr = approvals.New(approvals.Options{Requests: e.svc, Rooms: roomDir, TTL: time.Hour, Threads: e.th})
	e.svc.AddObserver(approvals.ObserverName, e.appr.Observe)
	e.router = rooms.New(e.svc, e.appr, roomDir, nil, slog.New(slog.DiscardHandler))
}

// exec is an exec runtime running the demo agent, logging to the env's log.
func (e *env) exec() *process.Runtime {
	return &process.Runtime{Command: demoCommand(), Env: helper("demo", "DEMO_AGENT_LOG="+e.log),
		Grace: 2 * time.Second, Workdir: e.t.TempDir()}
}

// start runs a scheduler over agents until the test ends (or stopScheduler).
func (e *env) start(configure func(*agents.Scheduler), ags ...agents.Agent) {
	e.t.Helper()
	s := agents.NewScheduler(e.svc, e.th, e.slog, ags...)
	if configure != nil {
		configure(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	e.mu.Lock()
	e.stop = func() { cancel(); <-done }
	e.mu.Unlock()
}

// stopScheduler stops the scheduler as a shutdown does, and waits for it.
func (e *env) stopScheduler() {
	e.mu.Lock()
	stop := e.stop
	e.stop = nil
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// ask creates a request of agent by user.
func (e *env) ask(user, agent, text string) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: user, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// waitFor waits until cond holds for request id, re-checking on every change
// of a request, for up to 30 s.
func (e *env) waitFor(id requests.ID, what string, cond func(*requests.Request) bool) *requests.Request {
	e.t.Helper()
	wake, unsub := e.db.Subscribe(requests.TopicRequests)
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
			e.t.Fatalf("%s: not %s within 30s; it is %s (reason %q, result %q)\naudit:\n%s\ndemo log:\n%s",
				id, what, r.State, r.Reason, r.Result, e.auditText(id), strings.Join(e.logLines(), "\n"))
		}
	}
}

// waitState waits until request id is in state st.
func (e *env) waitState(id requests.ID, st requests.State) *requests.Request {
	e.t.Helper()
	return e.waitFor(id, st.String(), func(r *requests.Request) bool { return r.State == st })
}

// logLines returns the demo agents' log without timestamps.
func (e *env) logLines() []string {
	f, err := os.Open(e.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		_, rest, _ := strings.Cut(sc.Text(), " ")
		out = append(out, rest)
	}
	return out
}

// waitLog waits until the demo log has a line equal to line.
func (e *env) waitLog(line string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if e.logIndex(line) >= 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("the demo log has no line %q within 30s:\n%s", line, strings.Join(e.logLines(), "\n"))
}

// logIndex is the index of line in the demo log, or -1.
func (e *env) logIndex(line string) int {
	for i, l := range e.logLines() {
		if l == line {
			return i
		}
	}
	return -1
}

// replies returns the texts of the replies queued in request id's thread
// (messages, notices and the final outcome), in order.
func (e *env) replies(id requests.ID) []chat.Message {
	e.t.Helper()
	var out []chat.Message
	err := e.db.View(e.ctx, func(tx store.Tx) error {
		effs, err := store.PendingEffects(tx, 0)
		if err != nil {
			return err
		}
		for _, se := range effs {
			var ef threads.Effect
			if err := json.Unmarshal(se.Payload, &ef); err != nil {
				return err
			}
			if ef.Request == id.String() && ef.Op == threads.OpReply {
				out = append(out, ef.Message)
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// finals returns the final outcomes posted in request id's thread.
func (e *env) finals(id requests.ID) []string {
	var out []string
	for _, m := range e.replies(id) {
		if m.Kind == "final" {
			out = append(out, m.Text)
		}
	}
	return out
}

// auditOf returns request id's audit records.
func (e *env) auditOf(id requests.ID) []audit.Record {
	e.t.Helper()
	recs, err := audit.List(e.ctx, e.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func (e *env) auditText(id requests.ID) string {
	var b strings.Builder
	recs, _ := audit.List(e.ctx, e.db, audit.Query{RequestID: id.String()}, 0)
	for _, r := range recs {
		fmt.Fprintf(&b, "  %s %s %s→%s %s\n", r.Actor, r.Action, r.From, r.To, r.Detail)
	}
	return b.String()
}

// hasAudit reports whether id has an audit record of action whose detail
// contains detail.
func (e *env) hasAudit(id requests.ID, action, detail string) bool {
	for _, r := range e.auditOf(id) {
		if r.Action == action && strings.Contains(r.Detail, detail) {
			return true
		}
	}
	return false
}

// waitAudit waits until request id has an audit record of action whose
// detail contains detail (records of other packages notify no topic the
// tests can wait on: this polls, with a deadline).
func (e *env) waitAudit(id requests.ID, action, detail string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if e.hasAudit(id, action, detail) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("%s: no audit record %s %q within 30s:\n%s", id, action, detail, e.auditText(id))
}
