package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTasksVisibleAndStopped: a background task an agent started is listed
// by GET /v1/rooms/{room}/tasks (besides its running request), by `bridge
// tasks list` and by the console's "tasks"; `bridge tasks stop` stops it,
// and the request that started it is woken with "the work is incomplete".
// Stopping it again, or an unknown task, is refused; so is dismissing it
// while it runs. A failed task stays listed until the console's "dismiss"
// clears it (a line in its thread says so).
func TestTasksVisibleAndStopped(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) }) // never left running
	script := filepath.Join(dir, "long.sh")
	writeFile(t, script, "while [ ! -e "+gate+" ]; do sleep 0.01; done\necho finished\n")
	p := startBridge(t, dir, []string{"USER=alice"}, "run", "--http", "127.0.0.1:0")
	base, tok := p.api(filepath.Join(dir, ".roombridge"))
	id := "R" + time.Now().UTC().Format("20060102") + "-01"
	q := regexp.QuoteMeta

	p.send("@coder background long sh " + script + "; yield on long")
	i := p.waitLine(0, q(id+" | started background task T-1 (long): sh "+script))

	type row struct {
		Kind      string   `json:"kind"`
		TaskID    string   `json:"task_id"`
		Name      string   `json:"name"`
		Command   []string `json:"command"`
		RequestID string   `json:"request_id"`
		Agent     string   `json:"agent"`
	}
	var list struct {
		Tasks []row `json:"tasks"`
		Count int   `json:"count"`
	}
	if c := call(t, http.MethodGet, base+"/v1/rooms/console/tasks", tok, nil, &list); c != http.StatusOK {
		t.Fatalf("tasks: HTTP %d", c)
	}
	want := row{Kind: "task", TaskID: "T-1", Name: "long", Command: []string{"sh", script}, RequestID: id, Agent: "coder"}
	found := false
	for _, r := range list.Tasks {
		found = found || (r.Kind == want.Kind && r.TaskID == want.TaskID && r.Name == want.Name &&
			strings.Join(r.Command, " ") == strings.Join(want.Command, " ") && r.RequestID == want.RequestID && r.Agent == want.Agent)
	}
	if !found || list.Count != 2 {
		t.Fatalf("tasks lack %+v (and its request): %+v", want, list)
	}

	out, errOut, code := runCLI(t, dir, "tasks", "list")
	if code != 0 || !regexp.MustCompile(`console\s+task\s+T-1\s+`+q(id)+`\s+coder\s+\S+\s+long: sh /`).MatchString(out) ||
		!regexp.MustCompile(`console\s+request\s+`+q(id)).MatchString(out) {
		t.Fatalf("bridge tasks list: code %d, out %q, err %q", code, out, errOut)
	}
	p.send("tasks")
	p.waitLine(i, q("* 1 background task(s) running:"))
	p.waitLine(i, `^  T-1 long \(coder for `+q(id)+`, since .*\): sh `+q(script))

	if _, errOut, code = runCLI(t, dir, "tasks", "dismiss", "T-1"); code != 1 || !strings.Contains(errOut, "T-1 is running; stop it first") ||
		!strings.Contains(errOut, "HTTP 409") {
		t.Fatalf("dismissing running T-1: code %d, stderr %q", code, errOut)
	}
	out, errOut, code = runCLI(t, dir, "tasks", "stop", "T-1")
	if code != 0 || !strings.HasPrefix(out, "T-1 (long) stopped") {
		t.Fatalf("bridge tasks stop: code %d, out %q, err %q", code, out, errOut)
	}
	p.waitLine(i, q(id+" | final: ")+".*"+q("task T-1 (long) stopped — incomplete: stopped by api:token"))
	if call(t, http.MethodGet, base+"/v1/rooms/console/tasks", tok, nil, &list); list.Count != 0 {
		t.Errorf("tasks after the stop: %+v", list)
	}
	if _, errOut, code = runCLI(t, dir, "tasks", "stop", "T-1"); code != 1 || !strings.Contains(errOut, "T-1 is stopped") || !strings.Contains(errOut, "HTTP 409") {
		t.Errorf("stopping T-1 again: code %d, stderr %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, dir, "tasks", "stop", "T-9"); code != 1 || !strings.Contains(errOut, "no such task") || !strings.Contains(errOut, "HTTP 404") {
		t.Errorf("stopping T-9: code %d, stderr %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, dir, "tasks"); code != 2 || !strings.Contains(errOut, "tasks list|stop|dismiss") {
		t.Errorf("bridge tasks: code %d, stderr %q", code, errOut)
	}

	// A failed task stays listed until dismissed.
	broken := filepath.Join(dir, "broken.sh")
	writeFile(t, broken, "echo half-done\nexit 3\n")
	id2 := "R" + time.Now().UTC().Format("20060102") + "-02"
	p.send("@coder background broken sh " + broken + "; yield on broken")
	i = p.waitLine(i, q(id2+" | task T-2 (broken) failed: exit status 3"))
	out, errOut, code = runCLI(t, dir, "tasks", "list")
	if code != 0 || !regexp.MustCompile(`console\s+task\s+T-2\s+`+q(id2)+`\s+coder\s+\S+\s+failed \(exit status 3; clear with `).MatchString(out) {
		t.Fatalf("bridge tasks list with a failed task: code %d, out %q, err %q", code, out, errOut)
	}
	p.send("tasks")
	p.waitLine(i, q("* 0 background task(s) running, 1 failed or interrupted"))
	p.send("dismiss T-2")
	p.waitLine(i, q("* task T-2 (broken) failed: exit status 3 dismissed (by console:alice)"))
	p.waitLine(i, q(id2+" | task T-2 (broken) failed: exit status 3 — dismissed by console:alice"))
	// Its request, told of the failure, answers and ends; then nothing runs.
	p.waitLine(i, q(id2+" | status: done"))
	if call(t, http.MethodGet, base+"/v1/rooms/console/tasks", tok, nil, &list); list.Count != 0 {
		t.Errorf("tasks after the dismissal: %+v", list)
	}
	if out, errOut, code = runCLI(t, dir, "tasks", "dismiss", "T-2"); code != 0 || !strings.Contains(out, "dismissed by console:alice") {
		t.Errorf("dismissing T-2 again: code %d, out %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, dir, "tasks", "dismiss", "T-9"); code != 1 || !strings.Contains(errOut, "no such task") || !strings.Contains(errOut, "HTTP 404") {
		t.Errorf("dismissing T-9: code %d, stderr %q", code, errOut)
	}
}
