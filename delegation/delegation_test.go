package delegation_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/ttl"
)

// The test binary doubles as the demo agent (as `bridge demo-agent`) when
// DELEGATION_TEST_HELPER=demo.
const helperEnv = "DELEGATION_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "demo" {
		os.Exit(demo.Main(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

const alice = "console:alice" // an owner: her asks are approved at once

// env is the whole bridge (core.New) on a real bolt file, in the console
// room, running the demo agent as coder and reviewer; the effects stay in
// the outbox to be read.
type env struct {
	t      *testing.T
	ctx    context.Context
	db     *bolt.DB
	svc    *requests.Service
	router *rooms.Router
	del    *delegation.Service
	log    string   // the demo agents' log
	dir    string   // the data dir
	shared *bolt.DB // the store kept across bridges (nil: each bridge its own)
}

func newEnv(t *testing.T, caps map[string]int) *env {
	t.Helper()
	return newEnvTimeout(t, caps, 0)
}

// newEnvTimeout is newEnv whose rendezvous time out after timeout (0: never).
func newEnvTimeout(t *testing.T, caps map[string]int, timeout time.Duration) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, ctx: context.Background(), log: filepath.Join(dir, "demo.log"), dir: dir}
	e.setBridge(e.startBridge(caps, timeout, nil))
	return e
}

// testConfig is the bridge's config: the console room with coder and
// reviewer, each agent capped at caps (agents only there are moved by
// hand), rendezvous timing out after timeout.
func testConfig(caps map[string]int, timeout time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "owner: acme\nowners: [%s]\ndata_dir: %%DIR%%\n", alice)
	fmt.Fprintf(&b, "delegation: {rendezvous_timeout: %s}\n", timeout)
	b.WriteString("rooms:\n  - {name: main, console: true, agents: [coder, reviewer]}\nagents:\n")
	names := []string{"coder", "reviewer"}
	for name := range caps {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		fmt.Fprintf(&b, "  %s: {kind: exec, command: [demo], max_background_tasks: %d}\n", name, caps[name])
	}
	return b.String()
}

// startBridge starts a bridge on e's data dir; coder runs on coder (nil:
// the demo agent), reviewer on the demo agent, other agents not at all.
func (e *env) startBridge(caps map[string]int, timeout time.Duration, coder agents.Runtime) *coretest.Bridge {
	return coretest.Start(e.t, coretest.Options{Config: testConfig(caps, timeout), Dir: e.dir, DB: e.shared,
		Surfaces: []string{chat.Console}, HoldOutbox: true,
		Runtimes: func(name string, _ config.Agent) (agents.Runtime, error) {
			switch {
			case name == "coder" && coder != nil:
				return coder, nil
			case name == "coder" || name == "reviewer":
				return e.demo(), nil
			}
			return nil, nil
		}})
}

// setBridge makes b the bridge e acts on.
func (e *env) setBridge(b *coretest.Bridge) {
	e.db, e.svc, e.router, e.del = b.DB, b.Requests(), b.Router(), b.Delegation()
}

// demo is the demo agent: this test binary, logging to e.log.
func (e *env) demo() *process.Runtime {
	return &process.Runtime{Command: []string{os.Args[0]}, Env: []string{helperEnv + "=demo",
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"), "DEMO_AGENT_LOG=" + e.log},
		Grace: 2 * time.Second, Workdir: e.t.TempDir()}
}

func (e *env) ask(agent, text string) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: alice, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// waitFor waits (on store notifications, up to 30 s) until cond holds.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	wake, unsub := e.db.Subscribe(requests.TopicRequests)
	defer unsub()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond) // rendezvous writes notify no topic
	defer tick.Stop()
	for !cond() {
		select {
		case <-wake:
		case <-tick.C:
		case <-deadline.C:
			e.t.Fatalf("not %s within 30s; audit:\n%s", what, e.allAudit())
		}
	}
}

// logHas reports whether the demo log has line (after its timestamp).
func (e *env) logHas(line string) bool {
	data, _ := os.ReadFile(e.log)
	for _, l := range strings.Split(string(data), "\n") {
		if _, rest, _ := strings.Cut(l, " "); rest == line {
			return true
		}
	}
	return false
}

func (e *env) get(id requests.ID) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) waitState(id requests.ID, st requests.State) *requests.Request {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("%s %s", id, st), func() bool { return e.get(id).State == st })
	return e.get(id)
}

// delegated returns the request delegated by ra (waits for it).
func (e *env) delegated(ra requests.ID) *requests.Request {
	e.t.Helper()
	var rb *requests.Request
	e.waitFor("delegated by "+ra.String(), func() bool {
		all, err := e.svc.List(e.ctx, requests.Filter{})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range all {
			if r.DelegatedBy == ra {
				rb = r
				return true
			}
		}
		return false
	})
	return rb
}

func (e *env) rendezvous(rb requests.ID) *delegation.Rendezvous {
	e.t.Helper()
	rv, err := e.del.Get(e.ctx, rb)
	if err != nil {
		e.t.Fatal(err)
	}
	return rv
}

// TestAskAnswered: A asks B, A's turn yields and RA stays running; B's
// answer closes the rendezvous and A finishes with B's real answer. The
// same completion a second time changes nothing.
func TestAskAnswered(t *testing.T) {
	e := newEnv(t, nil)
	ra := e.ask("coder", "ask reviewer say reading|echo looks good to me")
	rb := e.delegated(ra.ID)
	if rb.Agent != "reviewer" || rb.Ask != "say reading;echo looks good to me" || rb.Requester != alice {
		t.Errorf("RB %+v", rb)
	}
	got := e.waitState(ra.ID, requests.Done)
	want := "got answer " + rb.ID.String() + ": looks good to me"
	if got.Result != want {
		t.Errorf("RA result %q, want %q", got.Result, want)
	}
	if rv := e.rendezvous(rb.ID); rv.State != delegation.Answered || rv.From != ra.ID {
		t.Errorf("rendezvous %+v", rv)
	}

	// The same completion again: a no-op.
	before := e.get(ra.ID)
	err := e.db.Update(e.ctx, func(tx store.Tx) error {
		r, err := e.svc.GetTx(tx, rb.ID)
		if err != nil {
			return err
		}
		did, err := e.del.CompleteTx(tx, r)
		if did {
			t.Error("a second completion did something")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := e.get(ra.ID); after.Version != before.Version || after.State != before.State {
		t.Errorf("RA changed: %+v → %+v", before, after)
	}
	if rv := e.rendezvous(rb.ID); rv.State != delegation.Answered {
		t.Errorf("rendezvous %s after a second completion", rv.State)
	}
}

// TestAskRefused: asking oneself or an agent up the chain is refused with a
// clear message, and the asker goes on.
func TestAskRefused(t *testing.T) {
	e := newEnv(t, nil)
	ra := e.ask("coder", "ask coder do it yourself; echo alone")
	if got := e.waitState(ra.ID, requests.Done); got.Result != "alone" {
		t.Errorf("result %q", got.Result)
	}
	if !hasAudit(t, e, ra.ID, "call_refused", "coder cannot ask itself") {
		t.Errorf("no refusal audited")
	}
	// reviewer, asked by coder, asks coder back: a deadlock, refused.
	ra = e.ask("coder", "ask reviewer ask coder back again| echo no cycle")
	rb := e.delegated(ra.ID)
	got := e.waitState(ra.ID, requests.Done)
	if got.Result != "got answer "+rb.ID.String()+": no cycle" {
		t.Errorf("RA result %q", got.Result)
	}
	if !hasAudit(t, e, rb.ID, "call_refused", "up the delegation chain") {
		t.Errorf("no deadlock refusal audited for %s", rb.ID)
	}
}

func (e *env) allAudit() string {
	var b strings.Builder
	recs, _ := audit.List(e.ctx, e.db, audit.Query{}, 0)
	for _, r := range recs {
		fmt.Fprintf(&b, "  %s %s %s %s→%s %s\n", r.RequestID, r.Actor, r.Action, r.From, r.To, r.Detail)
	}
	return b.String()
}

func hasAudit(t *testing.T, e *env, id requests.ID, action, detail string) bool {
	t.Helper()
	recs, err := audit.List(e.ctx, e.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action == action && strings.Contains(r.Detail, detail) {
			return true
		}
	}
	return false
}

// TestCancelPropagates: RA cancelled while B works → RB cancelled, the
// rendezvous cancelled, and nothing delivered to A.
func TestCancelPropagates(t *testing.T) {
	e := newEnv(t, nil)
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	ra := e.ask("coder", "ask reviewer tool review "+gate+"| echo reviewed")
	rb := e.delegated(ra.ID)
	e.waitFor("B in its tool and RA waiting", func() bool {
		return e.logHas("tool start "+rb.ID.String()+" review") && strings.HasPrefix(e.get(ra.ID).Activity, "waiting")
	})
	if _, err := e.router.Cancel(e.ctx, ra.ID, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	e.waitState(ra.ID, requests.Cancelled)
	e.waitFor("B told of the cancel", func() bool { return e.logHas("cancel received " + rb.ID.String()) })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := e.waitState(rb.ID, requests.Cancelled)
	if !strings.Contains(got.Reason, ra.ID.String()) {
		t.Errorf("RB reason %q", got.Reason)
	}
	if rv := e.rendezvous(rb.ID); rv.State != delegation.Cancelled {
		t.Errorf("rendezvous %s", rv.State)
	}
}

// TestRendezvousTimeout: B works past the rendezvous timeout (its task
// runs): the ttl sweeper times the rendezvous out, B's request is cancelled
// and its task stopped, and A gets a terminal "timed out" answer and
// finishes. A second sweep changes nothing; an answered rendezvous leaves
// no timer behind.
func TestRendezvousTimeout(t *testing.T) {
	e := newEnvTimeout(t, nil, time.Hour)
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	ra := e.ask("coder", "ask reviewer background tests sh "+script(t, gate, "x")+"| yield on tests")
	rb := e.delegated(ra.ID)
	e.waitFor("rendezvous waiting on task", func() bool {
		rv, err := e.del.Get(e.ctx, rb.ID)
		return err == nil && rv.State == delegation.WaitingOnTask
	})
	clk := clock.NewFake(time.Now())
	sw, err := ttl.New(ttl.Options{Clock: clk}, e.del)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sw.SweepOnce(e.ctx); err != nil || res.Due != 0 {
		t.Fatalf("sweep before the deadline: %+v %v", res, err)
	}
	clk.Advance(2 * time.Hour)
	if res, err := sw.SweepOnce(e.ctx); err != nil || res.Expired != 1 {
		t.Fatalf("sweep after the deadline: %+v %v", res, err)
	}
	got := e.waitState(ra.ID, requests.Done)
	if want := "got answer " + rb.ID.String() + ": timed out: " + rb.ID.String() + " (reviewer) did not answer " +
		ra.ID.String() + " within 1h0m0s; it is cancelled"; got.Result != want {
		t.Errorf("RA result %q, want %q", got.Result, want)
	}
	if b := e.waitState(rb.ID, requests.Cancelled); !strings.Contains(b.Reason, "cancelled: timed out") {
		t.Errorf("RB reason %q", b.Reason)
	}
	if rv := e.rendezvous(rb.ID); rv.State != delegation.TimedOut {
		t.Errorf("rendezvous %s", rv.State)
	}
	if tk := findTask(t, e, "T-1"); tk.State != delegation.TaskStopped {
		t.Errorf("task %s", tk.State)
	}
	if res, err := sw.SweepOnce(e.ctx); err != nil || res.Due != 0 {
		t.Errorf("second sweep: %+v %v", res, err)
	}

	// Answered in time: the timer goes with the rendezvous.
	ra2 := e.ask("coder", "ask reviewer echo fine")
	e.waitState(ra2.ID, requests.Done)
	if due, err := e.del.Due(e.ctx, time.Now().Add(3*time.Hour), store.Timer{}, 0); err != nil || len(due) != 0 {
		t.Errorf("timers left: %v %v", due, err)
	}
}
