package realcli_test

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/requests"
)

// Codex CLI 0.169.0 (realcli.Versions) against the fake Responses API,
// through the whole bridge.

// codexTool is the name under which Codex offers the bridge's MCP tool
// (fakemodel lists a namespace's tools as NAMESPACE__TOOL).
func codexTool(name string) string { return "mcp__roombridge__" + name }

// codexCall is the model's call of the bridge's tool name: Codex offers
// an MCP server's tools as one namespace.
func codexCall(id, name string, input any) fakemodel.Reply {
	return fakemodel.Reply{Tools: []fakemodel.ToolCall{{ID: id, Name: name, Namespace: "mcp__roombridge", Input: input}}}
}

func TestCodexPlainAnswer(t *testing.T) {
	e := newEnv(t, "codex", func(_ int, r fakemodel.Request) fakemodel.Reply { return fakemodel.Text("four") })
	id := e.ask("agent", "what is 2+2?")
	r := e.waitEnd(id)
	if r.State != requests.Done || r.Result != "four" || r.Session == "" {
		t.Fatalf("%s %s: result %q reason %q session %q", id, r.State, r.Result, r.Reason, r.Session)
	}
	m := e.lastMain()
	for _, tool := range process.BridgeTools {
		if !m.HasTool(codexTool(tool)) {
			t.Errorf("the model request has no definition of %s; tools: %v", tool, m.ToolNames())
		}
	}
	// approval_prompt means something to Claude Code only.
	if slices.ContainsFunc(m.ToolNames(), func(n string) bool { return strings.Contains(n, "approval_prompt") }) {
		t.Errorf("Codex was offered approval_prompt: %v", m.ToolNames())
	}
	if !m.Has("ask_agent, background_run") {
		t.Error("the prompt does not name the bridge's tools")
	}
}

func TestCodexBuiltinTool(t *testing.T) {
	var note string
	e := newEnv(t, "codex", func(_ int, r fakemodel.Request) fakemodel.Reply {
		if out, ok := r.ToolResult(); ok {
			return fakemodel.Text("the note says: " + out)
		}
		return readCall("codex", note)
	})
	note = e.workFile("note.txt", "the build is green")
	id := e.ask("agent", "read the note")
	r := e.waitEnd(id)
	if r.State != requests.Done || !strings.Contains(r.Result, "the build is green") {
		t.Fatalf("%s %s: result %q reason %q", id, r.State, r.Result, r.Reason)
	}
}

// TestCodexAskAgent: the bridge's tools work from Codex (its exec mode
// would refuse an MCP call that needs approval).
func TestCodexAskAgent(t *testing.T) {
	e := newEnv(t, "codex", func(_ int, r fakemodel.Request) fakemodel.Reply {
		switch out, ok := r.ToolResult(); {
		case r.Has("answer of "):
			return fakemodel.Text("demo answered")
		case ok:
			return fakemodel.Text("asked demo: " + out)
		}
		return codexCall("call_ask", "ask_agent", map[string]any{"agent": "demo", "text": "echo PONG"})
	})
	id := e.ask("agent", "ask demo")
	r := e.waitEnd(id)
	if r.State != requests.Done || r.Result != "demo answered" {
		t.Fatalf("%s %s: result %q reason %q\nthread:\n%s", id, r.State, r.Result, r.Reason, e.thread(id))
	}
	if m := e.lastMain(); !m.Has("PONG") {
		t.Errorf("the last model call lacks demo's answer: %.400s", m.Body)
	}
}

func TestCodexReportProgress(t *testing.T) {
	var id atomic.Value
	var seen atomic.Int64
	var e *env
	e = newEnv(t, "codex", func(_ int, r fakemodel.Request) fakemodel.Reply {
		if _, ok := r.ToolResult(); ok {
			seen.Store(int64(e.get(id.Load().(requests.ID)).Progress))
			return fakemodel.Text("done")
		}
		return codexCall("call_p", "report_progress", map[string]any{"percent": 40, "text": "halfway"})
	})
	id.Store(e.ask("agent", "work"))
	r := e.waitEnd(id.Load().(requests.ID))
	if r.State != requests.Done || seen.Load() != 40 {
		t.Fatalf("%s: progress seen %d, result %q reason %q", r.State, seen.Load(), r.Result, r.Reason)
	}
}

// TestCodexFailedToolCall: a bridge tool call that fails is shown in the
// thread with its error.
func TestCodexFailedToolCall(t *testing.T) {
	e := newEnv(t, "codex", func(_ int, r fakemodel.Request) fakemodel.Reply {
		if _, ok := r.ToolResult(); ok {
			return fakemodel.Text("could not ask")
		}
		return codexCall("call_ask", "ask_agent", map[string]any{"agent": "ghost", "text": "hello"})
	})
	id := e.ask("agent", "ask a ghost")
	e.waitEnd(id)
	if th := e.thread(id); !strings.Contains(th, "ask_agent failed: ") || !strings.Contains(th, "ghost") {
		t.Errorf("the thread does not show the failed call with its error:\n%s", th)
	}
}

func TestCodexModelAPIErrors(t *testing.T) {
	// Codex retries a 5xx once without a word (request_max_retries), then
	// reconnects the stream, which it prints: 529 is given twice.
	cases := []apiErrorCase{
		{"400", fakemodel.Reply{Status: 400, Error: fakemodel.OpenAIError("invalid_request_error", "bad_input", "input is bad")}, []string{"model API: input is bad"}, 1},
		{"401", fakemodel.Reply{Status: 401, Error: fakemodel.OpenAIError("invalid_request_error", "invalid_api_key", "Incorrect API key provided")},
			[]string{"model API: 401 Incorrect API key provided", "agent agent", "env_key"}, 1},
		{"429", fakemodel.Reply{Status: 429, RetryAfter: "0", Error: fakemodel.OpenAIError("rate_limit_exceeded", "rate_limit_exceeded", "slow down")}, nil, 1},
		{"529", fakemodel.Reply{Status: 529, Error: fakemodel.OpenAIError("server_error", "overloaded", "Overloaded")}, nil, 2},
		{"dropped", fakemodel.Reply{Text: "an answer cut short", Drop: true}, nil, 1},
	}
	runAPIErrors(t, "codex", cases)
}
