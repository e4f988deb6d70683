package delegation_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// script writes a shell script that waits for gate, then prints out.
func script(t *testing.T, gate, out string) string {
	p := filepath.Join(t.TempDir(), "task.sh")
	body := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done\necho %s\n", gate, out)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTaskWakesB: B starts a task and yields: the rendezvous waits on the
// task and A gets nothing; the task's end wakes B, whose answer then
// reaches A.
func TestTaskWakesB(t *testing.T) {
	e := newEnv(t, nil)
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	sh := script(t, gate, "all-tests-pass")
	ra := e.ask("coder", "ask reviewer background tests sh "+sh+"| yield on tests")
	rb := e.delegated(ra.ID)
	e.waitFor("rendezvous waiting on task", func() bool {
		rv, err := e.del.Get(e.ctx, rb.ID)
		return err == nil && rv.State == delegation.WaitingOnTask
	})
	if r := e.get(ra.ID); r.State != requests.Running {
		t.Fatalf("RA is %s while B's task runs", r.State)
	}
	if r := e.get(rb.ID); r.State != requests.Running {
		t.Fatalf("RB is %s while its task runs", r.State)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := e.waitState(ra.ID, requests.Done)
	b := e.get(rb.ID)
	if b.State != requests.Done || !strings.Contains(b.Result, "task_result T-1: task T-1 (tests) succeeded") ||
		!strings.Contains(b.Result, "all-tests-pass") {
		t.Errorf("RB %s %q", b.State, b.Result)
	}
	if got.Result != "got answer "+rb.ID.String()+": "+b.Result {
		t.Errorf("RA result %q", got.Result)
	}
	if rv := e.rendezvous(rb.ID); rv.State != delegation.Answered {
		t.Errorf("rendezvous %s", rv.State)
	}
	lines := strings.Join(e.notices(rb.ID), "\n")
	for _, want := range []string{"started background task T-1 (tests): sh " + sh, "task T-1 (tests) succeeded"} {
		if !strings.Contains(lines, want) {
			t.Errorf("RB's thread lacks %q:\n%s", want, lines)
		}
	}
}

// notices returns the notices queued in request id's thread.
func (e *env) notices(id requests.ID) []string {
	e.t.Helper()
	var out []string
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
			if ef.Request == id.String() && ef.Op == threads.OpReply && ef.Message.Kind == "notice" {
				out = append(out, ef.Message.Text)
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// running makes a request of agent and moves it to running through the real
// state machine (no turn runs: the agent is not scheduled).
func running(t *testing.T, e *env, agent string) requests.ID {
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: agent, Room: "main", Surface: chat.Console, User: alice, Text: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Apply(e.ctx, r.ID, requests.Change{Event: requests.Start, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// TestTaskCap: with the default cap 3, the fourth concurrent task is
// refused with a clear message; two calls racing for the last slot never
// both succeed.
func TestTaskCap(t *testing.T) {
	e := newEnv(t, map[string]int{"coder": 0}) // 0: the default
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	sh := script(t, gate, "ok")
	for round := range 5 {
		id := running(t, e, "tester")
		for range 2 {
			if _, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "w", Command: []string{"sh", sh}}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "race", Command: []string{"sh", sh}})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.Is(err, delegation.ErrRefused) || !strings.Contains(err.Error(), "max_background_tasks is 3") {
				t.Errorf("round %d: refusal %v", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of two racing calls at the cap succeeded", round, ok)
		}
		_, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "fourth", Command: []string{"sh", sh}})
		if !errors.Is(err, delegation.ErrRefused) {
			t.Fatalf("the fourth task: %v", err)
		}
		// Cancel the request: its tasks stop, freeing the slots.
		if _, err := e.router.Cancel(e.ctx, id, alice, chat.Console); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Apply(e.ctx, id, requests.Change{Event: requests.Cancel, Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		ts, err := e.del.Tasks(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.Request == id && tk.State != delegation.TaskStopped {
				t.Errorf("task %s of cancelled %s is %s", tk.ID, id, tk.State)
			}
		}
	}
	// Stopped means killed: every process ends without its gate.
	done := make(chan struct{})
	go func() { e.del.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("stopped tasks' processes still run after 30s")
	}
}

// TestTaskFailsAndRestart: a failed task wakes B with its reason and
// partial output; a task whose process is not this bridge's (a restart) ends
// interrupted and its agent is told; the late real end of that process then
// changes nothing; a result for a request that ended is recorded, not lost.
func TestTaskFailsAndRestart(t *testing.T) {
	e := newEnv(t, nil)
	broken := filepath.Join(t.TempDir(), "broken.sh")
	if err := os.WriteFile(broken, []byte("echo half-done\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ra := e.ask("coder", "ask reviewer background broken sh "+broken+"| yield")
	got := e.waitState(ra.ID, requests.Done)
	for _, want := range []string{"task T-1 (broken) failed: exit status 3", "half-done"} {
		if !strings.Contains(got.Result, want) {
			t.Errorf("RA result %q lacks %q", got.Result, want)
		}
	}

	// A restart: a second service over the same store knows no process.
	gate := filepath.Join(t.TempDir(), "gate")
	sh := script(t, gate, "partial")
	id := running(t, e, "tester")
	task, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "long", Command: []string{"sh", sh}})
	if err != nil {
		t.Fatal(err)
	}
	fresh := delegation.New(delegation.Options{Requests: e.svc})
	if err := fresh.Recover(e.ctx); err != nil {
		t.Fatal(err)
	}
	tk := findTask(t, e, task)
	if tk.State != delegation.TaskInterrupted {
		t.Fatalf("task %s after restart", tk.State)
	}
	if !hasAudit(t, e, id, "task_interrupted", task) {
		t.Error("no audit of the interruption")
	}
	// The request ends; the old process's end arrives late: no change.
	if _, err := e.svc.Apply(e.ctx, id, requests.Change{Event: requests.Finish, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.del.Wait()
	if tk := findTask(t, e, task); tk.State != delegation.TaskInterrupted {
		t.Errorf("late end changed the task to %s", tk.State)
	}

	// A task of a request that then ends: its result is recorded.
	gate2 := filepath.Join(t.TempDir(), "gate2")
	id2 := running(t, e, "tester")
	task2, err := e.del.BackgroundRun(e.ctx, id2, agents.BackgroundRun{Name: "late", Command: []string{"sh", script(t, gate2, "late")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Apply(e.ctx, id2, requests.Change{Event: requests.Finish, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.del.Wait()
	if tk := findTask(t, e, task2); tk.State != delegation.TaskSucceeded || tk.Output != "late\n" {
		t.Errorf("task %+v", tk)
	}
	if !hasAudit(t, e, id2, "undelivered", task2) {
		t.Error("the late result is not recorded")
	}
	if n := strings.Join(e.notices(id2), "\n"); !strings.Contains(n, "the result of task "+task2+" arrived after this request ended") {
		t.Errorf("no notice of the late result in the thread:\n%s", n)
	}
}

func findTask(t *testing.T, e *env, id string) delegation.Task {
	t.Helper()
	ts, err := e.del.Tasks(e.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		if tk.ID == id {
			return tk
		}
	}
	t.Fatalf("no task %s", id)
	return delegation.Task{}
}

// TestCancelStopsTasks: RA cancelled while B waits on its task → RB
// cancelled and its task stopped (its process killed), nothing delivered to
// A.
func TestCancelStopsTasks(t *testing.T) {
	e := newEnv(t, nil)
	gate := filepath.Join(t.TempDir(), "never")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	ra := e.ask("coder", "ask reviewer background tests sh "+script(t, gate, "x")+"| yield on tests")
	rb := e.delegated(ra.ID)
	e.waitFor("rendezvous waiting on task", func() bool {
		rv, err := e.del.Get(e.ctx, rb.ID)
		return err == nil && rv.State == delegation.WaitingOnTask
	})
	e.waitFor("RB parked", func() bool { return strings.HasPrefix(e.get(rb.ID).Activity, "waiting") })
	if _, err := e.router.Cancel(e.ctx, ra.ID, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	e.waitState(ra.ID, requests.Cancelled)
	got := e.waitState(rb.ID, requests.Cancelled)
	if !strings.Contains(got.Reason, ra.ID.String()) {
		t.Errorf("RB reason %q", got.Reason)
	}
	if tk := findTask(t, e, "T-1"); tk.State != delegation.TaskStopped {
		t.Errorf("task %s", tk.State)
	}
	if rv := e.rendezvous(rb.ID); rv.State != delegation.Cancelled {
		t.Errorf("rendezvous %s", rv.State)
	}
	done := make(chan struct{})
	go func() { e.del.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped task's process still runs after 30s")
	}
}

// TestRunnerMayEndOnlyItsTasks: the end of a task reported from outside
// (a runner's task_end) is refused unless the task's agent is one the
// reporting runner hosts: a runner cannot end a task running on the
// bridge, or another runner's, and the task keeps running.
func TestRunnerMayEndOnlyItsTasks(t *testing.T) {
	e := newEnv(t, nil)
	gate := filepath.Join(t.TempDir(), "gate")
	id := running(t, e, "tester")
	task, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: "local", Command: []string{"sh", script(t, gate, "real output")}})
	if err != nil {
		t.Fatal(err)
	}
	tk := findTask(t, e, task)
	err = e.del.EndTask(e.ctx, tk.Owner, tk.ID, []string{"remote"}, delegation.TaskSucceeded, "", "forged output")
	if !errors.Is(err, delegation.ErrNotYourTask) {
		t.Fatalf("a foreign runner's end of a local task: %v, want ErrNotYourTask", err)
	}
	if tk := findTask(t, e, task); tk.State != delegation.TaskRunning {
		t.Errorf("the task is %s after a refused end, want running", tk.State)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.del.Wait()
	if tk := findTask(t, e, task); tk.State != delegation.TaskSucceeded || !strings.Contains(tk.Output, "real output") {
		t.Errorf("task %s with output %q, want its own end", tk.State, tk.Output)
	}
}
