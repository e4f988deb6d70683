package realcli_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/requests"
)

// Claude Code 2.1.328 (realcli.Versions) against the fake Messages API,
// through the whole bridge.

func TestClaudePlainAnswer(t *testing.T) {
	e := newEnv(t, "claude", func(_ int, r fakemodel.Request) fakemodel.Reply { return fakemodel.Text("four") })
	id := e.ask("agent", "what is 2+2?")
	r := e.waitEnd(id)
	if r.State != requests.Done || r.Result != "four" {
		t.Fatalf("%s %s: result %q reason %q", id, r.State, r.Result, r.Reason)
	}
	if r.Session == "" {
		t.Error("no session recorded")
	}
	// The bridge's tools reach the model: their definitions are in the
	// request's tools (not deferred behind Claude Code's tool search), and
	// the prompt names them.
	m := e.lastMain()
	for _, tool := range process.BridgeTools {
		if !m.HasTool("mcp__roombridge__" + tool) {
			t.Errorf("the model request has no definition of %s; tools: %v", tool, m.ToolNames())
		}
	}
	if !m.Has("ask_agent, background_run") {
		t.Error("the prompt does not name the bridge's tools")
	}
}

func TestClaudeBuiltinTool(t *testing.T) {
	var note string
	e := newEnv(t, "claude", func(_ int, r fakemodel.Request) fakemodel.Reply {
		if out, ok := r.ToolResult(); ok {
			return fakemodel.Text("the note says: " + out)
		}
		return fakemodel.Call("toolu_read", "Read", map[string]any{"file_path": note})
	})
	// In the agent's workdir: Claude Code reads there without asking.
	note = e.workFile("note.txt", "the build is green")
	id := e.ask("agent", "read the note")
	r := e.waitEnd(id)
	if r.State != requests.Done || !strings.Contains(r.Result, "the build is green") {
		t.Fatalf("%s %s: result %q reason %q", id, r.State, r.Result, r.Reason)
	}
}

// TestClaudePermission: Bash needs permission; Claude Code asks through the
// bridge's approval_prompt, which becomes an approval in the room.
func TestClaudePermission(t *testing.T) {
	for _, v := range []approvals.Verdict{approvals.Approve, approvals.Deny} {
		t.Run(string(v), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "marker")
			e := newEnv(t, "claude", func(_ int, r fakemodel.Request) fakemodel.Reply {
				if out, ok := r.ToolResult(); ok {
					return fakemodel.Text("bash: " + out)
				}
				return fakemodel.Call("toolu_bash", "Bash", map[string]any{"command": "echo ran > " + marker, "description": "write the marker"})
			})
			id := e.ask("agent", "write the marker")
			e.decide(id, 1, v)
			r := e.waitEnd(id)
			_, err := os.Stat(marker)
			if v == approvals.Approve {
				if r.State != requests.Done || err != nil {
					t.Fatalf("%s %s (%q, %q): the approved command did not run (%v)", id, r.State, r.Result, r.Reason, err)
				}
				return
			}
			if err == nil {
				t.Fatal("the denied command ran")
			}
			if th := e.thread(id); !strings.Contains(th, "not permitted to use: Bash") {
				t.Errorf("the thread does not say Claude was not permitted:\n%s", th)
			}
		})
	}
}

func TestClaudeAskAgent(t *testing.T) {
	e := newEnv(t, "claude", func(_ int, r fakemodel.Request) fakemodel.Reply {
		switch out, ok := r.ToolResult(); {
		case r.Has("answer of "):
			return fakemodel.Text("demo answered")
		case ok:
			return fakemodel.Text("asked demo: " + out)
		}
		return fakemodel.Call("toolu_ask", "mcp__roombridge__ask_agent", map[string]any{"agent": "demo", "text": "echo PONG"})
	})
	id := e.ask("agent", "ask demo")
	r := e.waitEnd(id)
	if r.State != requests.Done || r.Result != "demo answered" {
		t.Fatalf("%s %s: result %q reason %q", id, r.State, r.Result, r.Reason)
	}
	// The answer came back in the next turn's model call.
	if m := e.lastMain(); !m.Has("PONG") || !m.Has("answer of ") {
		t.Errorf("the last model call lacks demo's answer: %.400s", m.Body)
	}
}

func TestClaudeReportProgress(t *testing.T) {
	var id atomic.Value
	var seen atomic.Int64
	var e *env
	e = newEnv(t, "claude", func(_ int, r fakemodel.Request) fakemodel.Reply {
		if _, ok := r.ToolResult(); ok {
			// The report is in the store when the model hears back.
			seen.Store(int64(e.get(id.Load().(requests.ID)).Progress))
			return fakemodel.Text("done")
		}
		return fakemodel.Call("toolu_p", "mcp__roombridge__report_progress", map[string]any{"percent": 40, "text": "halfway"})
	})
	id.Store(e.ask("agent", "work"))
	r := e.waitEnd(id.Load().(requests.ID))
	if r.State != requests.Done || seen.Load() != 40 {
		t.Fatalf("%s: progress seen %d, result %q reason %q", r.State, seen.Load(), r.Result, r.Reason)
	}
}

// TestClaudeModelAPIErrors: the model API fails in each way once (401:
// always); the room sees the retry, or the failure at once.
func TestClaudeModelAPIErrors(t *testing.T) {
	cases := []apiErrorCase{
		{"400", fakemodel.Reply{Status: 400, Error: fakemodel.AnthropicError("invalid_request_error", "messages: bad input")}, []string{"400", "bad input"}, 1},
		{"401", fakemodel.Reply{Status: 401, Error: fakemodel.AnthropicError("authentication_error", "invalid x-api-key")},
			[]string{"authentication_failed", "agent agent", "ANTHROPIC_API_KEY"}, 1},
		{"429", fakemodel.Reply{Status: 429, RetryAfter: "0", Error: fakemodel.AnthropicError("rate_limit_error", "slow down")}, nil, 1},
		{"529", fakemodel.Reply{Status: 529, Error: fakemodel.AnthropicError("overloaded_error", "Overloaded")}, nil, 1},
		{"dropped", fakemodel.Reply{Text: "an answer cut short", Drop: true}, nil, 1},
	}
	runAPIErrors(t, "claude", cases)
}
