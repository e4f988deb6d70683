package delegation_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/console"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// screen is what the console room shows: the outbox delivered through the
// real console connector.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(s.buf.String(), "\n")
}

// deliver runs the outbox into a console room and returns its screen.
func (e *env) deliver() *screen {
	e.t.Helper()
	sc := &screen{}
	conn := console.New(strings.NewReader(""), sc, "main", "alice")
	d := threads.NewDeliverer(e.db, clock.Real{}, slog.New(slog.DiscardHandler), conn)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return sc
}

// waitLine waits (up to 30 s, polling the screen) until the screen shows
// line (exactly) after line index from, and returns the index after it.
func (e *env) waitLine(sc *screen, from int, line string) int {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ls := sc.lines()
		for i := from; i < len(ls); i++ {
			if ls[i] == line {
				return i + 1
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the room does not show %q within 30s; it shows:\n%s", line, strings.Join(ls, "\n"))
		}
		time.Sleep(5 * time.Millisecond) // polling the screen for the condition, with a deadline
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWaitingStatusAndTitle: the asker's thread status says what it waits
// on — the delegated request (short form), then its running task — and
// goes back to plain "running" when the rendezvous closes; the delegated
// request's thread names who asked. All through the outbox, into the
// console room.
func TestWaitingStatusAndTitle(t *testing.T) {
	e := newEnv(t, nil)
	sc := e.deliver()
	dir := t.TempDir()
	hold, gate := filepath.Join(dir, "hold"), filepath.Join(dir, "gate")
	t.Cleanup(func() { touch(t, hold); touch(t, gate) })

	// RA's agent is driven by the test (as a tester agent would call); B
	// is the demo agent.
	ra := running(t, e, "tester")
	rb, err := e.del.AskAgent(e.ctx, ra, "reviewer", "await "+hold+"; background tests sh "+script(t, gate, "green")+"; yield on tests", agents.CallKey{})
	if err != nil {
		t.Fatal(err)
	}
	if rb.Short() != "R-02" {
		t.Fatalf("RB is %s", rb)
	}
	e.waitLine(sc, 0, "== "+rb.String()+" · reviewer · asked by tester ("+ra.String()+") for "+alice+" ==")
	// RA's status lines, in order (threads are delivered in parallel).
	status := "   " + ra.String() + " | status: "
	i := e.waitLine(sc, 0, status+"running · waiting on R-02 (reviewer)")
	touch(t, hold)
	i = e.waitLine(sc, i, status+"running · waiting on R-02 (reviewer) · task T-1 running")
	touch(t, gate)
	e.waitState(rb, requests.Done)
	e.waitLine(sc, i, status+"running")
	if rv := e.rendezvous(rb); rv.State != delegation.Answered {
		t.Errorf("rendezvous %s", rv.State)
	}

	// A real agent asking: the title names it.
	ra2 := e.ask("coder", "ask reviewer echo fine")
	rb2 := e.delegated(ra2.ID)
	e.waitLine(sc, 0, "== "+rb2.ID.String()+" · reviewer · asked by coder ("+ra2.ID.String()+") for "+alice+" ==")
	e.waitState(ra2.ID, requests.Done)
}

// TestFailedTaskListedUntilDismissed: a failed task stays in the room's
// tasks (and the console's "tasks" text) until a person dismisses it; a
// dismissal is audited with its actor and said in the thread; dismissing a
// running task or an unknown one is refused with a clear error and an
// audit record, and changes nothing; a stopped task says its work is
// incomplete and is not listed; an interrupted one is listed.
func TestFailedTaskListedUntilDismissed(t *testing.T) {
	e := newEnv(t, nil)
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.sh")
	if err := os.WriteFile(broken, []byte("echo half-done\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(dir, "gate")
	t.Cleanup(func() { touch(t, gate) })
	id := running(t, e, "tester")
	failed, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "broken", Command: []string{"sh", broken}})
	if err != nil {
		t.Fatal(err)
	}
	long, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "long", Command: []string{"sh", script(t, gate, "x")}})
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("the broken task failed", func() bool { return findTask(t, e, failed).State == delegation.TaskFailed })

	listed := func() string {
		ts, err := e.del.Running(e.ctx, "main")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tk := range ts {
			ids = append(ids, tk.ID+":"+tk.State)
		}
		return strings.Join(ids, " ")
	}
	if got, want := listed(), failed+":failed "+long+":running"; got != want {
		t.Fatalf("listed %q, want %q", got, want)
	}
	text, err := e.command(alice, "tasks")
	if err != nil || !strings.Contains(text, "1 background task(s) running, 1 failed or interrupted") ||
		!strings.Contains(text, failed+" broken (tester for "+id.String()+", failed at ") || !strings.Contains(text, "exit status 3") {
		t.Errorf("tasks text %q %v", text, err)
	}
	if ts, _ := e.del.Running(e.ctx, "elsewhere"); len(ts) != 0 {
		t.Errorf("another room lists %v", ts)
	}

	// Refusals: running, unknown. Nothing changes; each is audited.
	if _, err := e.del.DismissTask(e.ctx, long, alice, chat.Console); !errors.Is(err, delegation.ErrTaskRunning) ||
		!strings.Contains(err.Error(), "stop it first") {
		t.Errorf("dismissing a running task: %v", err)
	}
	if _, err := e.del.DismissTask(e.ctx, "T-99", alice, chat.Console); !errors.Is(err, delegation.ErrNoTask) {
		t.Errorf("dismissing an unknown task: %v", err)
	}
	if !hasAudit(t, e, id, "task_dismiss_refused", long+" is running") {
		t.Error("the refused dismissal of a running task is not audited")
	}
	if n := countAudit(t, e, "task_dismiss_refused", `"T-99"`); n != 1 {
		t.Errorf("%d audit records of the refused unknown dismissal", n)
	}
	if got := listed(); got != failed+":failed "+long+":running" {
		t.Errorf("a refusal changed the listing: %q", got)
	}

	// The dismissal.
	got, err := e.command(alice, "dismiss "+failed)
	if err != nil || got != "task "+failed+" (broken) failed: exit status 3 dismissed (by "+alice+")" {
		t.Fatalf("dismiss: %q %v", got, err)
	}
	if got := listed(); got != long+":running" {
		t.Errorf("after the dismissal, listed %q", got)
	}
	if n := countAudit(t, e, "task_dismiss", failed); n != 1 || !auditBy(t, e, "task_dismiss", alice) {
		t.Errorf("%d task_dismiss records (by %s)", n, alice)
	}
	if n := strings.Join(e.notices(id), "\n"); !strings.Contains(n, "task "+failed+" (broken) failed: exit status 3 — dismissed by "+alice) {
		t.Errorf("no dismissal line in the thread:\n%s", n)
	}
	if _, err := e.del.DismissTask(e.ctx, failed, "console:bob", chat.Console); err != nil {
		t.Errorf("a second dismissal: %v", err)
	}
	if n := countAudit(t, e, "task_dismiss", failed); n != 1 {
		t.Errorf("a second dismissal was recorded again (%d records)", n)
	}
	if tk := findTask(t, e, failed); tk.DismissedBy != alice {
		t.Errorf("dismissed by %q", tk.DismissedBy)
	}

	// Stopped: incomplete, not listed.
	tk, err := e.del.StopTask(e.ctx, long, alice, chat.Console)
	if err != nil {
		t.Fatal(err)
	}
	if line := tk.Line(); line != "task "+long+" (long) stopped — incomplete: stopped by "+alice {
		t.Errorf("stopped line %q", line)
	}
	if n := strings.Join(e.notices(id), "\n"); !strings.Contains(n, "task "+long+" (long) stopped — incomplete: stopped by "+alice) {
		t.Errorf("no stopped line in the thread:\n%s", n)
	}
	if got := listed(); got != "" {
		t.Errorf("after the stop, listed %q", got)
	}
	if _, err := e.del.DismissTask(e.ctx, long, alice, chat.Console); err != nil {
		t.Errorf("dismissing a stopped task: %v", err)
	}

	// Interrupted (a restart): listed until dismissed.
	gate2 := filepath.Join(dir, "gate2")
	t.Cleanup(func() { touch(t, gate2) })
	lost, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "lost", Command: []string{"sh", script(t, gate2, "x")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := delegation.New(delegation.Options{Requests: e.svc}).Recover(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := listed(); got != lost+":interrupted" {
		t.Errorf("after a restart, listed %q", got)
	}
	if tk := findTask(t, e, lost); !strings.Contains(tk.Line(), "interrupted — incomplete: the bridge restarted") {
		t.Errorf("interrupted line %q", tk.Line())
	}
}

func countAudit(t *testing.T, e *env, action, detail string) int {
	t.Helper()
	n := 0
	err := audit.Each(e.ctx, e.db, audit.Query{}, func(r *audit.Record) error {
		if r.Action == action && strings.Contains(r.Detail, detail) {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func auditBy(t *testing.T, e *env, action, actor string) bool {
	t.Helper()
	found := false
	err := audit.Each(e.ctx, e.db, audit.Query{}, func(r *audit.Record) error {
		found = found || (r.Action == action && r.Actor == actor && r.Surface == chat.Console)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// agentRun starts a background run of reviewer (ask text) for a coder
// request whose turn is in a tool: the coder's agent then yields, and
// gets the task's result at its next turn boundary. It returns the coder's
// request, the task and the run's request.
func agentRun(t *testing.T, e *env, text string) (requests.ID, string, *requests.Request) {
	t.Helper()
	hold := filepath.Join(t.TempDir(), "hold")
	t.Cleanup(func() { touch(t, hold) })
	ra := e.ask("coder", "tool hold "+hold+"; yield on review")
	e.waitFor("the coder in its tool", func() bool { return e.logHas("tool start " + ra.ID.String() + " hold") })
	task, err := e.del.BackgroundRun(e.ctx, ra.ID, agents.BackgroundRun{Name: "review", Agent: "reviewer", Text: text})
	if err != nil {
		t.Fatal(err)
	}
	rt := e.delegated(ra.ID)
	if tk := findTask(t, e, task); tk.Run != rt.ID || tk.RunAgent != "reviewer" || tk.Agent != "coder" || tk.State != delegation.TaskRunning {
		t.Fatalf("task %+v, run %s", tk, rt.ID)
	}
	if rt.Agent != "reviewer" || rt.Ask != text || rt.Requester != alice {
		t.Fatalf("run request %+v", rt)
	}
	touch(t, hold)
	return ra.ID, task, rt
}

// waitRunEnd waits for run request rt to end in state, and checks that its
// task had ended by then (they end in one transaction).
func (e *env) waitRunEnd(rt requests.ID, task string, state requests.State) {
	e.t.Helper()
	e.waitFor("the run "+rt.String()+" "+state.String(), func() bool {
		if !e.get(rt).State.Terminal() {
			return false
		}
		if tk := findTask(e.t, e, task); tk.State == delegation.TaskRunning {
			e.t.Errorf("%s ended but its task %s still runs", rt, task)
		}
		return true
	})
	if got := e.get(rt); got.State != state {
		e.t.Errorf("run %s is %s (%s), want %s", rt, got.State, got.Reason, state)
	}
}

// TestBackgroundAgentRun: background_run with an agent starts a request of
// that agent (delegated by the starter, in its queue); its end ends the
// task — done: succeeded with the answer; failed: failed with the reason;
// stopped: its request is cancelled and the result says incomplete — and
// the starter's agent gets the result at its next turn boundary.
func TestBackgroundAgentRun(t *testing.T) {
	e := newEnv(t, nil)

	ra, task, rt := agentRun(t, e, "echo looks fine")
	e.waitRunEnd(rt.ID, task, requests.Done)
	got := e.waitState(ra, requests.Done)
	want := "task " + task + " (review · reviewer " + rt.ID.String() + ") succeeded\noutput:\nlooks fine"
	if !strings.Contains(got.Result, "task_result "+rt.ID.String()+" "+task+": "+want) {
		t.Errorf("coder's answer %q lacks %q", got.Result, want)
	}
	if tk := findTask(t, e, task); tk.State != delegation.TaskSucceeded || tk.Output != "looks fine" {
		t.Errorf("task %+v", tk)
	}
	lines := strings.Join(e.notices(ra), "\n")
	for _, l := range []string{"started background task " + task + " (review): reviewer " + rt.ID.String() + ": echo looks fine", want} {
		if !strings.Contains(lines, l) {
			t.Errorf("the coder's thread lacks %q:\n%s", l, lines)
		}
	}

	ra, task, rt = agentRun(t, e, "say half way; fail broken on purpose")
	e.waitRunEnd(rt.ID, task, requests.Failed)
	got = e.waitState(ra, requests.Done)
	if want := "task " + task + " (review · reviewer " + rt.ID.String() + ") failed: "; !strings.Contains(got.Result, want) ||
		!strings.Contains(got.Result, "broken on purpose") {
		t.Errorf("coder's answer %q lacks %q", got.Result, want)
	}

	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { touch(t, gate) })
	ra, task, rt = agentRun(t, e, "tool slow "+gate+"; echo never")
	e.waitFor("the reviewer in its tool", func() bool { return e.logHas("tool start " + rt.ID.String() + " slow") })
	if _, err := e.del.StopTask(e.ctx, task, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	got = e.waitState(ra, requests.Done)
	if want := "task " + task + " (review · reviewer " + rt.ID.String() + ") stopped — incomplete: stopped by " + alice; !strings.Contains(got.Result, want) {
		t.Errorf("coder's answer %q lacks %q", got.Result, want)
	}
	if r := e.get(rt.ID); !r.CancelRequested && !r.State.Terminal() {
		t.Errorf("the stopped run's request %s: %+v", rt.ID, r)
	}
	touch(t, gate)
	end := e.waitState(rt.ID, requests.Cancelled)
	if !strings.Contains(end.Reason, "its background task "+task+" ended stopped") {
		t.Errorf("run reason %q", end.Reason)
	}
	if tk := findTask(t, e, task); tk.State != delegation.TaskStopped || tk.Reason != "stopped by "+alice {
		t.Errorf("task after its request's end: %+v", tk)
	}
}

// TestBackgroundAgentRunCapRestartCancel: an agent run counts in its
// starter's cap; a restart interrupts command tasks but leaves agent runs
// to go on (their request resumes); cancelling the starter stops the run
// and cancels its request.
func TestBackgroundAgentRunCapRestartCancel(t *testing.T) {
	e := newEnv(t, map[string]int{"tester": 2})
	dir := t.TempDir()
	gate, gate2 := filepath.Join(dir, "gate"), filepath.Join(dir, "gate2")
	t.Cleanup(func() { touch(t, gate); touch(t, gate2) })
	id := running(t, e, "tester")
	run, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Agent: "reviewer", Text: "tool slow " + gate + "; echo late"})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "cmd", Command: []string{"sh", script(t, gate2, "x")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Agent: "reviewer", Text: "echo third"})
	if !errors.Is(err, delegation.ErrRefused) || !strings.Contains(err.Error(), "max_background_tasks is 2") {
		t.Fatalf("a third task over the cap: %v", err)
	}
	for _, bad := range []agents.BackgroundRun{
		{Agent: "nobody", Text: "x"},
		{Agent: "reviewer"},
		{Agent: "tester", Text: "myself"},
		{Agent: "reviewer", Text: "x", Command: []string{"true"}},
	} {
		if _, err := e.del.BackgroundRun(e.ctx, id, bad); !errors.Is(err, delegation.ErrRefused) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	rt := e.delegated(id)
	e.waitFor("the reviewer in its tool", func() bool { return e.logHas("tool start " + rt.ID.String() + " slow") })

	// A restart: the command is interrupted, the agent run goes on.
	if err := delegation.New(delegation.Options{Requests: e.svc}).Recover(e.ctx); err != nil {
		t.Fatal(err)
	}
	if tk := findTask(t, e, cmd); tk.State != delegation.TaskInterrupted {
		t.Errorf("command task after a restart: %s", tk.State)
	}
	if tk := findTask(t, e, run); tk.State != delegation.TaskRunning {
		t.Errorf("agent run after a restart: %s", tk.State)
	}

	// The starter is cancelled: the run stops, its request is cancelled.
	if _, err := e.router.Cancel(e.ctx, id, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Apply(e.ctx, id, requests.Change{Event: requests.Cancel, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if tk := findTask(t, e, run); tk.State != delegation.TaskStopped {
		t.Errorf("agent run after its starter's cancel: %s", tk.State)
	}
	e.waitFor("the run told to cancel", func() bool { return e.logHas("cancel received " + rt.ID.String()) })
	touch(t, gate)
	e.waitState(rt.ID, requests.Cancelled)
	if !hasAudit(t, e, id, "undelivered", "the result of task "+run) && !hasAudit(t, e, id, "task_stopped", run) {
		t.Errorf("the stopped run is not recorded for %s", id)
	}
}

// command types text in the console room as user, through the router, and
// returns the answer (or the refusal as an error).
func (e *env) command(user, text string) (string, error) {
	resp := e.router.Handle(e.ctx, chat.Event{Kind: chat.Command, Surface: chat.Console, Channel: "main", User: user, Text: text})
	if resp.Error {
		return "", errors.New(resp.Text)
	}
	return resp.Text, nil
}
