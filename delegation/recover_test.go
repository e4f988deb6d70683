package delegation_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
)

// TestRecoverSparesLiveTasks: Recover (run by every leader term, while
// calls may start tasks) never takes a task of this process for one that
// did not survive a restart: not while it is being started (committed,
// its process not yet known), nor while its end is being recorded.
func TestRecoverSparesLiveTasks(t *testing.T) {
	const n = 12
	e := newEnv(t, map[string]int{"tester": 2 * n})
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	open := filepath.Join(t.TempDir(), "open")
	if err := os.WriteFile(open, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	id := running(t, e, "tester")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.del.Recover(e.ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	// Tasks that end at once (their end races Recover) and tasks that
	// wait on a gate (their start races Recover).
	for name, sh := range map[string]string{"ends": script(t, open, "done"), "held": script(t, gate, "held")} {
		for range n {
			if _, err := e.del.BackgroundRun(e.ctx, id, agents.BackgroundRun{Name: name, Command: []string{"sh", sh}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.waitFor("the ungated tasks ended", func() bool {
		ts, err := e.del.Tasks(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, tk := range ts {
			if tk.Name == "ends" && tk.State != delegation.TaskRunning {
				ended++
			}
		}
		return ended >= n
	})
	close(stop)
	wg.Wait()
	ts, err := e.del.Tasks(e.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2*n {
		t.Fatalf("%d tasks, want %d", len(ts), 2*n)
	}
	for _, tk := range ts {
		want := delegation.TaskSucceeded
		if tk.Name == "held" {
			want = delegation.TaskRunning
		}
		if tk.State != want {
			t.Errorf("task %s (%s) is %s (%q), want %s", tk.ID, tk.Name, tk.State, tk.Reason, want)
		}
	}
	if _, err := e.router.Cancel(e.ctx, id, alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Apply(e.ctx, id, requests.Change{Event: requests.Cancel, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	e.del.Wait()
}
