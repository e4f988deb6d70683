package agents_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// TestStrictOrderPerAgent: requests to one agent run one after the other, in
// ID order, as the agent's own log shows: each turn ends before the next one
// begins.
func TestStrictOrderPerAgent(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	// While the agent is busy, four requests are queued at once: the
	// worker finds them all and must take them in ID order.
	gate := filepath.Join(t.TempDir(), "gate")
	busy := e.ask(alice, "coder", "tool hold "+gate+"; echo answer busy")
	e.waitLog("tool start " + busy.ID.String() + " hold")
	ids := []requests.ID{busy.ID}
	err := e.db.Update(e.ctx, func(tx store.Tx) error {
		ids = ids[:1]
		for i := range 4 {
			r, err := e.svc.CreateTx(tx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: alice,
				Text: fmt.Sprintf("tool work 20ms; echo answer %d", i)})
			if err != nil {
				return err
			}
			ids = append(ids, r.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(gate, nil, 0o644)
	e.waitState(busy.ID, requests.Done)
	ids = ids[1:]
	for i, id := range ids {
		r := e.waitState(id, requests.Done)
		if want := fmt.Sprintf("answer %d", i); r.Result != want {
			t.Errorf("%s: result %q, want %q", id, r.Result, want)
		}
	}
	// The log is a sequence of complete turns, in ID order.
	var order []string
	open := ""
	for _, l := range e.logLines() {
		f := strings.Fields(l)
		switch {
		case f[0] == "turn":
			if open != "" {
				t.Fatalf("turn of %s began while %s ran:\n%s", f[1], open, strings.Join(e.logLines(), "\n"))
			}
			open = f[1]
			order = append(order, f[1])
		case f[0] == "final":
			if f[1] != open {
				t.Fatalf("final of %s while %s ran", f[1], open)
			}
			open = ""
		case f[0] == "tool" && f[2] != open:
			t.Fatalf("tool of %s while %s ran", f[2], open)
		}
	}
	want := []string{busy.ID.String()}
	for _, id := range ids {
		want = append(want, id.String())
	}
	if !slices.Equal(order, want) {
		t.Fatalf("turn order %v, want %v", order, want)
	}
}

// TestAgentsOverlap: requests to two agents run at the same time. Each agent
// waits for a file only the other creates during its turn, so both can
// finish only if their turns overlap; the log shows both turns began before
// either ended.
func TestAgentsOverlap(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	dir := t.TempDir()
	a, b := filepath.Join(dir, "coder-was-here"), filepath.Join(dir, "reviewer-was-here")
	r1 := e.ask(alice, "coder", fmt.Sprintf("touch %s; await %s; echo coder done", a, b))
	r2 := e.ask(alice, "reviewer", fmt.Sprintf("touch %s; await %s; echo reviewer done", b, a))
	e.waitState(r1.ID, requests.Done)
	e.waitState(r2.ID, requests.Done)
	for _, l := range []string{"await " + r1.ID.String() + " found " + b, "await " + r2.ID.String() + " found " + a} {
		if e.logIndex(l) < 0 {
			t.Fatalf("log has no %q: the turns did not overlap:\n%s", l, strings.Join(e.logLines(), "\n"))
		}
	}
	var firstFinal, lastTurn int = -1, -1
	for i, l := range e.logLines() {
		if strings.HasPrefix(l, "turn ") {
			lastTurn = i
		}
		if strings.HasPrefix(l, "final ") && firstFinal < 0 {
			firstFinal = i
		}
	}
	if lastTurn > firstFinal {
		t.Fatalf("a turn began (line %d) after another ended (line %d): no overlap", lastTurn, firstFinal)
	}
}

// TestCancelMidTool: a cancel while a tool runs lets that tool finish,
// starts no further tool, and ends the request cancelled with what was done
// posted as incomplete.
func TestCancelMidTool(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "build-may-end")
	r := e.ask(alice, "coder", "say starting; tool build "+gate+"; tool test 10ms; echo all done")
	id := r.ID.String()
	e.waitLog("tool start " + id + " build")
	if _, err := e.router.Cancel(e.ctx, r.ID, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	e.waitLog("cancel received " + id) // the agent knows while its tool still runs
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := e.waitState(r.ID, requests.Cancelled)
	e.waitLog("stopped " + id)
	if e.logIndex("tool end "+id+" build") < 0 {
		t.Error("the running tool did not finish")
	}
	if i := e.logIndex("tool start " + id + " test"); i >= 0 {
		t.Errorf("a tool started after the cancel:\n%s", strings.Join(e.logLines(), "\n"))
	}
	if e.logIndex("final "+id) >= 0 {
		t.Error("the agent gave a final answer after the cancel")
	}
	if got.Reason != "cancelled by "+alice || !strings.Contains(got.Result, "ran build") {
		t.Errorf("reason %q, result %q", got.Reason, got.Result)
	}
	fin := e.finals(r.ID)
	if len(fin) != 1 || !strings.Contains(fin[0], "incomplete — done so far: said starting; ran build") {
		t.Errorf("thread outcome %q", fin)
	}
	if !e.hasAudit(r.ID, "cancel_requested", "cancelled by") || !e.hasAudit(r.ID, "cancel", "") {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
}

// TestCancelQueued: a queued request is cancelled at once and never runs.
func TestCancelQueued(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	busy := e.ask(alice, "coder", "tool hold "+gate+"; echo ok")
	queued := e.ask(alice, "coder", "echo never")
	e.waitLog("tool start " + busy.ID.String() + " hold")
	got, err := e.router.Cancel(e.ctx, queued.ID, alice, chat.Console)
	if err != nil || got.State != requests.Cancelled {
		t.Fatalf("cancel of a queued request: %v, %+v", err, got)
	}
	_ = os.WriteFile(gate, nil, 0o644)
	e.waitState(busy.ID, requests.Done)
	next := e.ask(alice, "coder", "echo after")
	e.waitState(next.ID, requests.Done)
	for _, l := range e.logLines() {
		if strings.Contains(l, queued.ID.String()) {
			t.Fatalf("the cancelled request ran: %q", l)
		}
	}
}

// TestResumeAfterShutdown: a request running when the scheduler stops stays
// running; the next scheduler continues the same request with its session,
// and the timeline shows an interruption, not a second request.
func TestResumeAfterShutdown(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	r := e.ask(alice, "coder", "tool work "+gate+"; echo finished")
	id := r.ID.String()
	e.waitLog("tool start " + id + " work")
	running := e.waitFor(r.ID, "with a session", func(r *requests.Request) bool { return r.Session != "" })
	e.stopScheduler()
	if cur, _ := e.svc.Get(e.ctx, r.ID); cur.State != requests.Running {
		t.Fatalf("after shutdown the request is %s, want running", cur.State)
	}
	_ = os.WriteFile(gate, nil, 0o644)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	done := e.waitState(r.ID, requests.Done)
	e.waitLog("resumed session " + running.Session + " for " + id)
	if done.Session != running.Session || done.Result != "finished" {
		t.Errorf("session %q → %q, result %q", running.Session, done.Session, done.Result)
	}
	if n := len(e.finals(r.ID)); n != 1 {
		t.Errorf("%d final answers in the thread, want 1", n)
	}
	if !e.hasAudit(r.ID, "interrupted", "") || !e.hasAudit(r.ID, "resume", running.Session) {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
	all, _ := e.svc.List(e.ctx, requests.Filter{})
	if len(all) != 1 {
		t.Errorf("%d requests, want 1", len(all))
	}
}

// TestReferencesReachTurn: the result of a request the ask mentions is in the
// new request's turn input.
func TestReferencesReachTurn(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	first := e.ask(alice, "coder", "echo forty-two")
	e.waitState(first.ID, requests.Done)
	second := e.ask(alice, "reviewer", "check "+first.ID.Short()+" please")
	got := e.waitState(second.ID, requests.Done)
	e.waitLog("reference " + first.ID.String() + " forty-two")
	if !strings.Contains(got.Result, "references: "+first.ID.String()+" (done): forty-two") {
		t.Errorf("result %q", got.Result)
	}
}

// TestBadAgents: every way an agent can misbehave ends in failed, with the
// reason in the request, its thread and its audit trail, and never a hang.
func TestBadAgents(t *testing.T) {
	e := newEnv(t)
	quick := e.exec()
	quick.Grace = 200 * time.Millisecond
	timed := e.exec()
	timed.Grace, timed.TurnTimeout = 200*time.Millisecond, 500*time.Millisecond
	e.start(nil, agents.Agent{Name: "coder", Runtime: quick}, agents.Agent{Name: "reviewer", Runtime: timed})
	cases := []struct {
		agent, ask, reason string
	}{
		{"coder", "say hi; exit 3", "agent exited without a final answer (exit status 3) (stderr: demo-agent: exiting with status 3)"},
		{"coder", "exit 0", "agent exited without a final answer (stderr: demo-agent: exiting with status 0)"},
		{"coder", "say hi; garbage; echo never", `agent protocol error: not a JSON event: "this is not json"`},
		{"coder", "big 1100000", "agent protocol error: an output line is over 1048576 bytes"},
		{"coder", "fail the disk is full", "agent reported: the disk is full (stderr: demo-agent: failing: the disk is full)"},
		{"coder", "progress 150 too far", "agent protocol error: progress 150 is outside 0-100"},
		{"coder", "yield", "the agent yielded, but delegation is not available"},
		{"reviewer", "sleep 30s; echo late", "turn timed out after 500ms"},
		// Deaf to SIGINT and SIGTERM: only SIGKILL ends it.
		{"reviewer", "trap; tool spin 30s; echo late", "turn timed out after 500ms"},
	}
	var ids []requests.ID
	for _, c := range cases {
		ids = append(ids, e.ask(alice, c.agent, c.ask).ID)
	}
	for i, c := range cases {
		r := e.waitState(ids[i], requests.Failed)
		if r.Reason != c.reason {
			t.Errorf("%q: reason %q, want %q", c.ask, r.Reason, c.reason)
		}
		if fin := e.finals(ids[i]); len(fin) != 1 || fin[0] != "failed: "+c.reason {
			t.Errorf("%q: thread outcome %q", c.ask, fin)
		}
		if !e.hasAudit(ids[i], "fail", c.reason) {
			t.Errorf("%q: audit:\n%s", c.ask, e.auditText(ids[i]))
		}
	}
	// A final answer followed by a process that will not exit is an
	// answer; the process is stopped.
	r := e.ask(alice, "coder", "echo fine; linger 30s")
	if got := e.waitState(r.ID, requests.Done); got.Result != "fine" {
		t.Errorf("lingering agent: result %q", got.Result)
	}
}

// TestRequestApproval: an agent's request_approval during a run becomes an
// approval card; the decision goes back to the agent. Without an approver the
// agent is told so, and the refusal is audited.
func TestRequestApproval(t *testing.T) {
	t.Run("no approver", func(t *testing.T) {
		e := newEnv(t)
		e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
		r := e.ask(alice, "coder", "approve deploy to prod; echo went on")
		e.waitState(r.ID, requests.Done)
		if !slices.ContainsFunc(e.replies(r.ID), func(m chat.Message) bool {
			return m.Text == "approval: not approved: no approver configured"
		}) {
			t.Errorf("thread: %+v", e.replies(r.ID))
		}
		if !e.hasAudit(r.ID, "call_refused", "request_approval: not approved: no approver configured") {
			t.Errorf("audit:\n%s", e.auditText(r.ID))
		}
	})
	t.Run("approved", func(t *testing.T) {
		e := newEnv(t)
		e.start(func(s *agents.Scheduler) { s.Approver = e.appr }, agents.Agent{Name: "coder", Runtime: e.exec()})
		r := e.ask(alice, "coder", "approve deploy to prod; echo deployed")
		e.waitAudit(r.ID, "approval_requested", "deploy to prod")
		if _, err := e.router.Decide(e.ctx, r.ID.String()+".1", true, alice, chat.Console); err != nil {
			t.Fatal(err)
		}
		e.waitState(r.ID, requests.Done)
		e.waitLog("response " + r.ID.String() + " c1 ok=true approved by " + alice)
	})
	t.Run("withdrawn by a cancel", func(t *testing.T) {
		e := newEnv(t)
		e.start(func(s *agents.Scheduler) { s.Approver = e.appr }, agents.Agent{Name: "coder", Runtime: e.exec()})
		r := e.ask(alice, "coder", "tool prepare 1ms; approve deploy to prod; tool deploy 1ms; echo deployed")
		e.waitAudit(r.ID, "approval_requested", "deploy to prod")
		if _, err := e.router.Cancel(e.ctx, r.ID, alice, chat.Console); err != nil {
			t.Fatal(err)
		}
		got := e.waitState(r.ID, requests.Cancelled)
		if e.logIndex("tool start "+r.ID.String()+" deploy") >= 0 {
			t.Error("the agent went on after the cancel")
		}
		if !strings.Contains(got.Result, "ran prepare") {
			t.Errorf("result %q", got.Result)
		}
	})
}

// TestDelegationUnavailable: without a delegator, ask_agent and
// background_run are answered so (and audited), and the agent goes on.
func TestDelegationUnavailable(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	r := e.ask(alice, "coder", "ask reviewer look at this; background tests go test ./...; echo alone")
	got := e.waitState(r.ID, requests.Done)
	if got.Result != "alone" {
		t.Errorf("result %q", got.Result)
	}
	var texts []string
	for _, m := range e.replies(r.ID) {
		texts = append(texts, m.Text)
	}
	for _, want := range []string{"ask_agent failed: delegation is not available", "background_run failed: delegation is not available"} {
		if !slices.Contains(texts, want) {
			t.Errorf("thread %q lacks %q", texts, want)
		}
	}
	if !e.hasAudit(r.ID, "call_refused", "ask_agent") || !e.hasAudit(r.ID, "call_refused", "background_run") {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
}

// delegator is a minimal Delegator over the real request service, standing
// in for the delegation package (issue 7): ask_agent creates the delegated
// request; its answer is delivered to the asker when it ends.
type delegator struct {
	e *env
}

func (d *delegator) AskAgent(ctx context.Context, from requests.ID, agent, text string, _ agents.CallKey) (requests.ID, error) {
	parent, err := d.e.svc.Get(ctx, from)
	if err != nil {
		return requests.ID{}, err
	}
	r, err := d.e.svc.Create(ctx, requests.Ask{Agent: agent, Room: parent.Room, Surface: parent.Surface,
		User: parent.Requester, Text: text, DelegatedBy: from, Approved: true})
	if err != nil {
		return requests.ID{}, err
	}
	go d.answer(r.ID, from)
	return r.ID, nil
}

// answer delivers request id's final answer to from when id ends.
func (d *delegator) answer(id, from requests.ID) {
	ctx := d.e.ctx // ends with the test
	wake, unsub := d.e.db.Subscribe(requests.TopicRequests)
	defer unsub()
	for {
		done, err := d.e.svc.Get(ctx, id)
		if err != nil {
			return
		}
		if done.State.Terminal() {
			_ = d.e.db.Update(ctx, func(tx store.Tx) error {
				return agents.DeliverTx(tx, d.e.svc, from, agents.Input{Kind: agents.InputAnswer, RequestID: done.ID.String(),
					State: done.State.String(), Text: done.Result})
			})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
	}
}

func (d *delegator) BackgroundRun(context.Context, requests.ID, agents.BackgroundRun) (string, error) {
	return "", errors.New("not in this test")
}

func (d *delegator) Waiting(context.Context, requests.ID) (bool, error) { return true, nil }

// TestDelegationHooks: with a delegator, ask_agent creates the delegated
// request, the asker's turn yields (it stays running, waiting, and its agent
// takes nothing else), and the answer starts its next turn with the same
// session.
func TestDelegationHooks(t *testing.T) {
	e := newEnv(t)
	e.start(func(s *agents.Scheduler) { s.Delegator = &delegator{e: e} },
		agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	r := e.ask(alice, "coder", "ask reviewer tool review "+gate+" | echo looks good")
	parked := e.waitFor(r.ID, "waiting", func(r *requests.Request) bool { return strings.HasPrefix(r.Activity, "waiting") })
	queued := e.ask(alice, "coder", "echo next")
	asked, _ := e.svc.List(e.ctx, requests.Filter{Agent: "reviewer"})
	if len(asked) != 1 || asked[0].DelegatedBy != r.ID {
		t.Fatalf("delegated requests: %+v", asked)
	}
	delegated := asked[0].ID
	e.waitLog("tool start " + delegated.String() + " review")
	if cur, _ := e.svc.Get(e.ctx, queued.ID); cur.State != requests.Approved {
		t.Errorf("coder took another request while one waits: %s", cur.State)
	}
	_ = os.WriteFile(gate, nil, 0o644)
	done := e.waitState(r.ID, requests.Done)
	want := "got answer " + delegated.String() + ": looks good"
	if done.Result != want || done.Session != parked.Session {
		t.Errorf("result %q (want %q), session %q → %q", done.Result, want, parked.Session, done.Session)
	}
	e.waitLog("resumed session " + parked.Session + " for " + r.ID.String())
	e.waitState(queued.ID, requests.Done)
	if !e.hasAudit(r.ID, "yield", "waiting on "+delegated.String()) || !e.hasAudit(r.ID, "wake", "1 new input") {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
}

// TestReplies: a person's reply in a thread reaches the agent at its next
// turn boundary: the first turn of a queued request, the next turn of a
// waiting one; a reply that comes after the last turn is reported as not
// delivered, and a reply to an ended request is refused.
func TestReplies(t *testing.T) {
	e := newEnv(t)
	e.start(func(s *agents.Scheduler) { s.Delegator = &delegator{e: e} },
		agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	busy := e.ask(alice, "coder", "tool hold "+gate+"; echo busy done")
	queued := e.ask(alice, "coder", "echo queued done")
	e.waitLog("tool start " + busy.ID.String() + " hold")
	if err := agents.Reply(e.ctx, e.svc, queued.ID, bob, chat.Console, "use the staging db"); err != nil {
		t.Fatal(err)
	}
	// A reply to the running turn is not spliced in: it is reported after.
	if err := agents.Reply(e.ctx, e.svc, busy.ID, bob, chat.Console, "too late"); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(gate, nil, 0o644)
	e.waitState(queued.ID, requests.Done)
	e.waitLog("input " + queued.ID.String() + " reply " + bob + ": use the staging db")
	if !e.hasAudit(queued.ID, "reply", "use the staging db") {
		t.Errorf("audit:\n%s", e.auditText(queued.ID))
	}
	if !e.hasAudit(busy.ID, "undelivered", "reply from "+bob+" arrived after the last turn: too late") ||
		!slices.ContainsFunc(e.replies(busy.ID), func(m chat.Message) bool { return m.Kind == "notice" }) {
		t.Errorf("undelivered reply not reported: audit:\n%s", e.auditText(busy.ID))
	}
	err := agents.Reply(e.ctx, e.svc, busy.ID, bob, chat.Console, "hello?")
	if !errors.Is(err, agents.ErrEnded) {
		t.Errorf("reply to an ended request: %v", err)
	}

	// A waiting request: the reply wakes it.
	r := e.ask(alice, "coder", "ask reviewer tool review "+filepath.Join(t.TempDir(), "never")+"; echo x")
	e.waitFor(r.ID, "waiting", func(r *requests.Request) bool { return strings.HasPrefix(r.Activity, "waiting") })
	if err := agents.Reply(e.ctx, e.svc, r.ID, bob, chat.Console, "any news?"); err != nil {
		t.Fatal(err)
	}
	got := e.waitState(r.ID, requests.Done)
	if got.Result != "got reply "+bob+": any news?" {
		t.Errorf("result %q", got.Result)
	}
}

// TestCancelWhileWaiting: a request whose agent waits on a delegation is
// between turns, so a cancel ends it at once.
func TestCancelWhileWaiting(t *testing.T) {
	e := newEnv(t)
	e.start(func(s *agents.Scheduler) { s.Delegator = &delegator{e: e} },
		agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	r := e.ask(alice, "coder", "say asking; ask reviewer tool review "+gate+"; echo x")
	e.waitFor(r.ID, "waiting", func(r *requests.Request) bool { return strings.HasPrefix(r.Activity, "waiting") })
	if _, err := e.router.Cancel(e.ctx, r.ID, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	got := e.waitState(r.ID, requests.Cancelled)
	if got.Reason != "cancelled by "+alice {
		t.Errorf("reason %q", got.Reason)
	}
}

// TestCancelWhileDown: a request cancelled while no bridge ran it (its turn
// was cut by a shutdown) ends cancelled when the scheduler starts again,
// without another turn.
func TestCancelWhileDown(t *testing.T) {
	e := newEnv(t)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "never")
	r := e.ask(alice, "coder", "tool work "+gate+"; echo finished")
	e.waitLog("tool start " + r.ID.String() + " work")
	e.stopScheduler()
	if _, err := e.router.Cancel(e.ctx, r.ID, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	got := e.waitState(r.ID, requests.Cancelled)
	if got.Reason != "cancelled by "+alice {
		t.Errorf("reason %q", got.Reason)
	}
	turns := 0
	for _, l := range e.logLines() {
		if strings.HasPrefix(l, "turn "+r.ID.String()) {
			turns++
		}
	}
	if turns != 1 {
		t.Errorf("%d turns, want 1", turns)
	}
}

// quickTasks is a delegator whose background tasks end at once: each
// result is in the request's pending input before the turn that started it
// yields, and nothing is left open to wait on.
type quickTasks struct {
	delegator
}

func (d *quickTasks) BackgroundRun(ctx context.Context, from requests.ID, run agents.BackgroundRun) (string, error) {
	err := d.e.db.Update(ctx, func(tx store.Tx) error {
		return agents.DeliverTx(tx, d.e.svc, from, agents.Input{Kind: agents.InputTaskResult, TaskID: "T-1",
			State: "succeeded", Text: "task T-1 (" + run.Name + ") succeeded"})
	})
	return "T-1", err
}

func (d *quickTasks) Waiting(context.Context, requests.ID) (bool, error) { return false, nil }

// TestYieldSeesInputOfItsTurn: a task that ends during the very turn that
// started it is something to wait on: the yield parks the request, and the
// next turn gets the result (rather than the request failing with "waits
// on nothing").
func TestYieldSeesInputOfItsTurn(t *testing.T) {
	e := newEnv(t)
	e.start(func(s *agents.Scheduler) { s.Delegator = &quickTasks{delegator{e: e}} },
		agents.Agent{Name: "coder", Runtime: e.exec()})
	r := e.ask(alice, "coder", "background quick true; yield on quick")
	got := e.waitState(r.ID, requests.Done)
	if !strings.Contains(got.Result, "task T-1 (quick) succeeded") {
		t.Errorf("result %q", got.Result)
	}
	if !e.hasAudit(r.ID, "yield", "on quick") || !e.hasAudit(r.ID, "wake", "1 new input") {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
	// Without anything new in the pending input, a yield still waits on nothing.
	r2 := e.ask(alice, "coder", "yield on air")
	if got := e.waitState(r2.ID, requests.Failed); !strings.Contains(got.Reason, "waits on nothing") {
		t.Errorf("reason %q", got.Reason)
	}
}
