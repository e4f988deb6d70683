package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/internal/realcli"
	"github.com/roombridge/roombridge/requests"
)

// TestClaudeResumeAfterKill: the real Claude Code (internal/realcli) runs a
// turn for the bridge binary; the bridge is SIGKILLed while the model call
// after a tool is under way; the next bridge on the same data dir resumes
// the request with the same Claude session (--resume), whose history still
// holds the first turn's tool output.
func TestClaudeResumeAfterKill(t *testing.T) {
	bin := realcli.Bin(t, "claude")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	note := filepath.Join(data, "work", "coder", "note.txt")
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	model := fakemodel.Anthropic(t, func(_ int, r fakemodel.Request) fakemodel.Reply {
		_, ok := r.ToolResult()
		switch {
		case r.Has("The bridge restarted"):
			return fakemodel.Text("resumed")
		case ok:
			select { // the bridge dies while this call runs
			case <-release:
			case <-time.After(time.Minute):
			}
			return fakemodel.Text("too late")
		}
		return fakemodel.Call("toolu_read", "Read", map[string]any{"file_path": note})
	})
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, fmt.Sprintf(`owner: acme
owners: [console:alice]
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
rooms:
  - {name: main, console: true, agents: [coder]}
agents:
  coder: {kind: claude, command: [%q], home: %q}
`, data, bin, filepath.Join(dir, "home")))
	if err := os.MkdirAll(filepath.Dir(note), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, note, "the build is green")
	env := realcli.ClaudeEnv(model.URL, 2)

	p := startBridge(t, dir, env, "run", "--config", cfg)
	base, token := p.api(data)
	var r requests.Request
	if code := call(t, http.MethodPost, base+"/v1/requests", token, map[string]string{"room": "main", "agent": "coder", "text": "read the note"}, &r); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	deadline := time.Now().Add(time.Minute)
	for !hasToolResult(model.Requests()) {
		if time.Now().After(deadline) {
			t.Fatalf("the model never got the tool's result; stderr:\n%s", p.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var before requests.Request
	call(t, http.MethodGet, base+"/v1/requests/"+r.ID.String(), token, nil, &before)
	if before.Session == "" {
		t.Fatal("no session recorded before the kill")
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	free() // the orphaned Claude Code finishes and exits
	_ = os.Remove(filepath.Join(data, "http.addr"))

	p2 := startBridge(t, dir, env, "run", "--config", cfg)
	base, token = p2.api(data)
	var after requests.Request
	deadline = time.Now().Add(time.Minute)
	for call(t, http.MethodGet, base+"/v1/requests/"+r.ID.String(), token, nil, &after); !after.State.Terminal(); call(t, http.MethodGet, base+"/v1/requests/"+r.ID.String(), token, nil, &after) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s after the restart", r.ID, after.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after.State != requests.Done || after.Result != "resumed" || after.Session != before.Session {
		t.Fatalf("%s %s: result %q reason %q session %q (was %q)", r.ID, after.State, after.Result, after.Reason, after.Session, before.Session)
	}
	reqs := model.Requests()
	if last := reqs[len(reqs)-1]; !last.Has("the build is green") {
		t.Error("the resumed session lost the first turn's tool output")
	}
}

func hasToolResult(reqs []fakemodel.Request) bool {
	for _, r := range reqs {
		if _, ok := r.ToolResult(); ok && len(r.ToolNames()) > 0 {
			return true
		}
	}
	return false
}
