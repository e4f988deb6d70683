package runners_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tcpcut"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
)

// holding is an agent whose turn runs until the test ends it.
type holding struct{ release chan struct{} }

func (a holding) Run(ctx context.Context, _ agents.Turn, _ agents.Sink) (agents.Outcome, error) {
	select {
	case <-a.release:
		return agents.Outcome{Final: "done"}, nil
	case <-ctx.Done():
		return agents.Outcome{}, ctx.Err()
	}
}

// taskEnded waits until task id of the test bridge is no longer running.
func taskEnded(t *testing.T, b *coretest.Bridge, id string) delegation.Task {
	t.Helper()
	var got delegation.Task
	waitFor(t, "task "+id+" ending", func() bool {
		ts, err := b.Delegation().Tasks(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.ID == id {
				got = tk
			}
		}
		return got.State != "" && got.State != delegation.TaskRunning
	})
	return got
}

// TestBackgroundCommandsRunOnRunner: a runner-hosted agent's
// background_run command runs on the runner, in the agent's workdir
// there, and reports back as a local one does: success with its output,
// failure with its reason, a stop that kills it.
func TestBackgroundCommandsRunOnRunner(t *testing.T) {
	b := startBridge(t)
	ctx := context.Background()
	tok := addRunner(t, b.DB, "laptop")
	work := t.TempDir()
	release := make(chan struct{})
	r, err := runners.NewRunner(runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok,
		Agents: map[string]agents.Runtime{"coder": holding{release}}, Workdirs: map[string]string{"coder": work},
		Retry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	t.Cleanup(func() { close(release); cancel(); <-done })
	waitConnected(t, b, "laptop")
	id := ask(t, b)
	waitFor(t, "the turn running", func() bool {
		got, err := b.Requests().Get(ctx, id)
		return err == nil && got.State == requests.Running
	})
	run := func(name, script string) string {
		t.Helper()
		task, err := b.Delegation().BackgroundRun(ctx, id, agents.BackgroundRun{Name: name, Command: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}

	ok := taskEnded(t, b, run("where", "pwd; echo fine"))
	if ok.State != delegation.TaskSucceeded || !strings.Contains(ok.Output, work) || !strings.Contains(ok.Output, "fine") {
		t.Fatalf("task %+v, want succeeded with output from the runner's workdir %s", ok, work)
	}
	bad := taskEnded(t, b, run("bad", "echo broke; exit 3"))
	if bad.State != delegation.TaskFailed || bad.Reason != "exit status 3" || !strings.Contains(bad.Output, "broke") {
		t.Fatalf("task %+v, want failed: exit status 3, with its output", bad)
	}
	pidFile := filepath.Join(work, "pid")
	long := run("long", "echo $$ > pid; exec sleep 30")
	var pid int
	waitFor(t, "the long task's process", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if _, err := b.Delegation().StopTask(ctx, long, "console:you", "console"); err != nil {
		t.Fatal(err)
	}
	if st := taskEnded(t, b, long); st.State != delegation.TaskStopped {
		t.Fatalf("task %+v, want stopped", st)
	}
	waitFor(t, "the stopped task's process killed on the runner", func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	waitFor(t, "the runner forgetting the ended tasks", func() bool { return r.Tasks() == 0 })
}

// TestBackgroundCommandAcrossReconnects: a command that ends while its
// runner is cut off is recorded when the runner is back (its end kept
// until acknowledged); a command whose runner restarted ends interrupted.
func TestBackgroundCommandAcrossReconnects(t *testing.T) {
	b := startBridge(t)
	ctx := context.Background()
	tok := addRunner(t, b.DB, "laptop")
	p := tcpcut.New(t, strings.TrimPrefix(b.URL, "http://"))
	work := t.TempDir()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var logs syncbuf.Buffer
	start := func() (r *runners.Runner, stop func()) {
		r, _, stop = goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL()}, Token: tok,
			Agents: map[string]agents.Runtime{"coder": holding{release}}, Workdirs: map[string]string{"coder": work},
			Retry: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		return r, stop
	}
	r, stop := start()
	waitConnected(t, b, "laptop")
	id := ask(t, b)
	waitFor(t, "the turn running", func() bool {
		got, err := b.Requests().Get(ctx, id)
		return err == nil && got.State == requests.Running
	})
	gate := filepath.Join(work, "gate")
	late, err := b.Delegation().BackgroundRun(ctx, id, agents.BackgroundRun{Name: "late",
		Command: []string{"sh", "-c", "while [ ! -e gate ]; do sleep 0.01; done; echo late"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command on the runner", func() bool { return r.Tasks() == 1 })
	p.Cut()
	waitFor(t, "the bridge seeing the cut", func() bool { return !connected(t, b) })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command ending while cut off", func() bool { return strings.Contains(logs.String(), "background task ended") })
	p.Heal()
	if got := taskEnded(t, b, late); got.State != delegation.TaskSucceeded || !strings.Contains(got.Output, "late") {
		t.Fatalf("task %+v, want succeeded with its output, reported after the reconnect", got)
	}
	waitFor(t, "the runner forgetting the recorded end", func() bool { return r.Tasks() == 0 })

	long, err := b.Delegation().BackgroundRun(ctx, id, agents.BackgroundRun{Name: "long", Command: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the long command on the runner", func() bool { return r.Tasks() == 1 })
	stop()
	waitFor(t, "the bridge seeing the runner stop", func() bool { return !connected(t, b) })
	start()
	if got := taskEnded(t, b, long); got.State != delegation.TaskInterrupted || !strings.Contains(got.Reason, "runner laptop restarted") {
		t.Fatalf("task %+v, want interrupted: the runner restarted", got)
	}
}
