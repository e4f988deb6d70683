package realcli_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/requests"
)

// The bridge stops hard in the middle of a turn (its context ends while
// the model call after a tool is under way: the CLI is interrupted, the
// request stays running) and starts again on the same store: the request
// resumes the CLI's session, or, when the CLI no longer has it (lose:
// its session files are gone, as on another machine), continues in a
// fresh session from a recap.

func TestClaudeResume(t *testing.T)      { testResume(t, "claude", false) }
func TestClaudeSessionLost(t *testing.T) { testResume(t, "claude", true) }
func TestCodexResume(t *testing.T)       { testResume(t, "codex", false) }
func TestCodexSessionLost(t *testing.T)  { testResume(t, "codex", true) }

func testResume(t *testing.T, kind string, lose bool) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var note string
	e := newEnv(t, kind, func(_ int, r fakemodel.Request) fakemodel.Reply {
		_, ok := r.ToolResult()
		switch {
		case r.Has("recap: your earlier session"):
			return fakemodel.Text("continued from the recap")
		case r.Has("The bridge restarted"):
			return fakemodel.Text("resumed")
		case ok:
			// The turn is cut here: the bridge stops while this call runs.
			select {
			case <-release:
			case <-time.After(wait):
			}
			return fakemodel.Text("too late")
		}
		return readCall(kind, note)
	})
	note = e.workFile("note.txt", "the build is green")
	id := e.ask("agent", "read the note")
	waitFor(t, "the model call after the tool", func() bool {
		for _, r := range e.model.Requests() {
			if _, ok := r.ToolResult(); ok && isMain(r) {
				return true
			}
		}
		return false
	})
	session := e.get(id).Session
	e.b.Stop()
	once.Do(func() { close(release) })
	if session == "" {
		t.Fatal("no session before the stop")
	}
	if lose {
		for _, dir := range []string{filepath.Join(e.home, ".claude", "projects"), filepath.Join(e.home, ".codex", "sessions")} {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.start()
	r := e.waitEnd(id)
	last := e.lastMain()
	if !e.audited(id, "interrupted") {
		t.Error("the request was not interrupted by the stop")
	}
	if !lose {
		if r.State != requests.Done || r.Result != "resumed" {
			t.Fatalf("%s %s: result %q reason %q", id, r.State, r.Result, r.Reason)
		}
		if r.Session != session {
			t.Errorf("session %q after the resume, want %q", r.Session, session)
		}
		if !last.Has("the build is green") {
			t.Error("the resumed session lost the first turn's tool output")
		}
		return
	}
	if r.State != requests.Done || r.Result != "continued from the recap" {
		t.Fatalf("%s %s: result %q reason %q", id, r.State, r.Result, r.Reason)
	}
	if !e.audited(id, "session_lost") {
		t.Error("no session_lost in the audit trail")
	}
	if th := e.thread(id); !strings.Contains(th, "continues in a fresh session") {
		t.Errorf("the thread does not say the session was lost:\n%s", th)
	}
	if r.Session == session || r.Session == "" {
		t.Errorf("session %q after the loss (was %q)", r.Session, session)
	}
	if !last.Has("read the note") || !last.Has("You were interrupted") {
		t.Errorf("the fresh session's prompt lacks the ask or the recap: %.600s", last.Body)
	}
}

// readCall is the model's call of the CLI's built-in tool that reads path.
func readCall(kind, path string) fakemodel.Reply {
	if kind == "claude" {
		return fakemodel.Call("toolu_read", "Read", map[string]any{"file_path": path})
	}
	return fakemodel.Call("call_read", "exec_command", map[string]any{"cmd": "cat " + path})
}
