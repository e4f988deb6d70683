package process

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/roombridge/roombridge/agents"
)

// decodeFixture runs a recorded stream through a decoder.
func decodeFixture(t *testing.T, dec decoder, fixture string) []agents.TurnEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	var out []agents.TurnEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, MaxLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		evs, err := dec.decode(line)
		if err != nil {
			t.Fatalf("%s: %v", fixture, err)
		}
		out = append(out, evs...)
	}
	return out
}

func TestClaudeDecoder(t *testing.T) {
	cases := []struct {
		fixture, session string
		want             []agents.TurnEvent
	}{
		{"claude/simple.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "90e4ba3c-4e5a-403d-89dc-632d156e38ee"},
			{Type: agents.EventFinal, Text: "The module path is `example.com/demo`, declared on the first line of `go.mod`."},
		}},
		{"claude/tools.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "a1dcb8fd-32db-4037-86e1-283ce8a2465c"},
			{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "Bash"},
			{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "Bash"},
			{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "Read"},
			{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "Read"},
			{Type: agents.EventFinal, Text: "The parser tests pass (`go test ./internal/parser/...` → ok). `Parse` in `internal/parser/parser.go` is a thin wrapper around `strings.Fields`, so it splits on any run of whitespace and never returns empty fields."},
		}},
		// Resumed with the session it reports: no new session event.
		{"claude/resume.jsonl", "90e4ba3c-4e5a-403d-89dc-632d156e38ee", []agents.TurnEvent{
			{Type: agents.EventFinal, Text: "It is `example.com/demo` — same as before."},
		}},
		{"claude/error.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "0905a759-1603-443f-970d-b433363af3e1"},
			{Type: agents.EventError, Message: `claude: API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		}},
		// is_error with subtype success is a failure.
		{"claude/error_api.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "a7e23eda-1e2d-4d17-a714-64f78304c67e"},
			{Type: agents.EventError, Message: "claude: Invalid API key · Fix external API key"},
		}},
	}
	for _, c := range cases {
		got := decodeFixture(t, &claudeDecoder{session: c.session}, c.fixture)
		if !slices.EqualFunc(got, c.want, eventEqual) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.fixture, got, c.want)
		}
	}
}

func TestClaudeDecoderEdges(t *testing.T) {
	d := &claudeDecoder{}
	lines := []string{
		`not json at all`,
		`{"type":"system","subtype":"init","session_id":"s1","mcp_servers":[{"name":"roombridge","status":"failed"}]}`,
		`{"type":"assistant","message":{"content":[{"type":"text","text":"Looking."}]},"parent_tool_use_id":null,"session_id":"s1"}`,
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Task","input":{}}]},"parent_tool_use_id":null,"session_id":"s1"}`,
		// A sub-agent's tools run inside the Task tool: not safe points.
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Grep","input":{}}]},"parent_tool_use_id":"t1","session_id":"s1"}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"x"}]},"parent_tool_use_id":"t1","session_id":"s1"}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"done"}]}]},"parent_tool_use_id":null,"session_id":"s1"}`,
		`{"type":"user","message":{"content":"a plain string"},"session_id":"s1"}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"","session_id":"s2","permission_denials":[{"tool_name":"Bash","tool_use_id":"t3","tool_input":{}}]}`,
	}
	var got []agents.TurnEvent
	for _, l := range lines {
		evs, err := d.decode([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	want := []agents.TurnEvent{
		{Type: agents.EventSession, ID: "s1"},
		{Type: agents.EventMessage, Text: "(MCP server roombridge is failed)"},
		{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "Task"},
		{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "Task"},
		{Type: agents.EventSession, ID: "s2"},
		{Type: agents.EventMessage, Text: "Claude Code was not permitted to use: Bash"},
		// An empty result falls back to the last text.
		{Type: agents.EventFinal, Text: "Looking."},
	}
	if !slices.EqualFunc(got, want, eventEqual) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
	if _, err := d.decode([]byte(`{"type":`)); err == nil {
		t.Error("a broken JSON line was accepted")
	}
}

func TestCodexDecoder(t *testing.T) {
	cases := []struct {
		fixture, session string
		want             []agents.TurnEvent
	}{
		{"codex/simple.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "019a3c5e-7d21-7b40-9c1e-5f2a8e4d6b13"},
			{Type: agents.EventFinal, Text: "The module path is `example.com/demo` (first line of `go.mod`)."},
		}},
		{"codex/tools.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "019a3c61-02f8-7a93-8b55-c0d7e1f49a26"},
			{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "shell: bash -lc 'go test ./internal/parser/...'"},
			{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "shell: bash -lc 'go test ./internal/parser/...'"},
			{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "shell: bash -lc 'rg -n TODO internal/parser'"},
			{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "shell: bash -lc 'rg -n TODO internal/parser'"},
			{Type: agents.EventTool, Phase: agents.PhaseStart, Name: `shell: bash -lc "sed -n '1,40p' internal/parser/parser.go"`},
			{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: `shell: bash -lc "sed -n '1,40p' internal/parser/parser.go"`},
			{Type: agents.EventFinal, Text: "Tests pass (`ok example.com/demo/internal/parser`). There are no TODOs in the package. `Parse` just wraps `strings.Fields`, so it splits on any whitespace run and never yields empty fields."},
		}},
		{"codex/resume.jsonl", "019a3c5e-7d21-7b40-9c1e-5f2a8e4d6b13", []agents.TurnEvent{
			{Type: agents.EventFinal, Text: "Still `example.com/demo` — `go.mod` has not changed."},
		}},
		{"codex/failed.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "019a3c66-9e4b-7d10-a2f7-41b8c03d5e97"},
			// Issue 16: a reconnect is a retry in the status line; an
			// authentication failure fails the turn at once, naming the
			// agent and its credentials; turn.failed is read, not pasted.
			{Type: evStatus, Text: "model API: stream disconnected before completion: error sending request for url (https://api.openai.com/v1/responses), retry 1/5"},
			{Type: agents.EventError, Message: "codex: model API: 401 Incorrect API key provided: the credentials of agent (unnamed) were refused; they come from " + codexCreds("")},
			{Type: agents.EventError, Message: "codex: model API: 401 Incorrect API key provided"},
		}},
		{"codex/mcp.jsonl", "", []agents.TurnEvent{
			{Type: agents.EventSession, ID: "019a3c6a-1c3d-7e52-9f08-7a6b2d4c8e01"},
			{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "mcp: roombridge.post_message"},
			{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "mcp: roombridge.post_message"},
			{Type: agents.EventFinal, Text: "Posted the status to the room."},
		}},
	}
	for _, c := range cases {
		got := decodeFixture(t, &codexDecoder{session: c.session}, c.fixture)
		if !slices.EqualFunc(got, c.want, eventEqual) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.fixture, got, c.want)
		}
	}
}

func TestCodexDecoderEdges(t *testing.T) {
	d := &codexDecoder{}
	var got []agents.TurnEvent
	for _, l := range []string{
		`{"type":"thread.started","thread_id":"th"}`,
		`{"type":"item.started","item":{"id":"item_0","type":"todo_list","items":[{"text":"a","completed":true},{"text":"b","completed":false}]}}`,
		`{"type":"item.completed","item":{"id":"item_1","type":"file_change","changes":[{"path":"a.go","kind":"update"}],"status":"completed"}}`,
		`{"type":"error","message":"stream error"}`,
		`{"type":"turn.failed"}`,
	} {
		evs, err := d.decode([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	want := []agents.TurnEvent{
		{Type: agents.EventSession, ID: "th"},
		{Type: agents.EventProgress, Percent: 50, Text: "plan"},
		// turn.failed without a message takes the last error notice.
		{Type: agents.EventError, Message: "codex: stream error"},
	}
	if !slices.EqualFunc(got, want, eventEqual) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

func TestPrompt(t *testing.T) {
	got := Prompt(agents.Turn{RequestID: "R20261129-07", Resumed: true, Input: []agents.Input{
		{Kind: agents.InputAsk, Text: "-fix the build"},
		{Kind: agents.InputReference, RequestID: "R20261129-05", State: "done", Text: "it was the linker"},
		{Kind: agents.InputReply, From: "slack:U1", Text: "use go 1.26"},
		{Kind: agents.InputTaskResult, TaskID: "t1", State: "failed", Text: "exit 1"},
		{Kind: agents.InputAnswer, RequestID: "R20261129-08", State: "done", Text: "LGTM"},
	}})
	want := `[roombridge request R20261129-07] The bridge restarted while you worked on this request; continue where you left off.

-fix the build

--- result of R20261129-05 (done), mentioned in the ask ---
it was the linker

--- reply in the thread from slack:U1 ---
use go 1.26

--- background task t1 ended (failed) ---
exit 1

--- answer of R20261129-08 (done) ---
LGTM
`
	if got != want {
		t.Errorf("prompt:\n%s\nwant:\n%s", got, want)
	}
}

func eventEqual(a, b agents.TurnEvent) bool {
	return a.Type == b.Type && a.ID == b.ID && a.Phase == b.Phase && a.Name == b.Name && a.Percent == b.Percent &&
		a.Text == b.Text && a.Message == b.Message && a.Reason == b.Reason
}

// TestClaudeDecoderLive: with Runtime.Stream (--include-partial-messages),
// stream_event text deltas are deltas, and the text written before a tool
// is a message in the thread, not dropped.
func TestClaudeDecoderLive(t *testing.T) {
	got := decodeFixture(t, &claudeDecoder{live: true}, "claude/partial.jsonl")
	want := []agents.TurnEvent{
		{Type: agents.EventSession, ID: "5d1f0c2e-9b1a-4a57-8f0e-2c7d8e6b9a10"},
		{Type: agents.EventDelta, Text: "Running the "},
		{Type: agents.EventDelta, Text: "tests first."},
		{Type: agents.EventMessage, Text: "Running the tests first."},
		{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "Bash"},
		{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "Bash"},
		{Type: agents.EventDelta, Text: "All tests "},
		{Type: agents.EventDelta, Text: "pass."},
		{Type: agents.EventFinal, Text: "All tests pass."},
	}
	if !slices.EqualFunc(got, want, eventEqual) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

// TestCodexDecoderLive: with Runtime.Stream, an agent message followed by a
// tool is a message in the thread; the last one stays the answer.
func TestCodexDecoderLive(t *testing.T) {
	d := &codexDecoder{live: true}
	var got []agents.TurnEvent
	for _, line := range []string{
		`{"type":"thread.started","thread_id":"th1"}`,
		`{"type":"item.completed","item":{"id":"item_r","type":"reasoning","text":"**Checking the build first**"}}`,
		`{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Checking the build."}}`,
		`{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"go build ./...","status":"in_progress"}}`,
		`{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"go build ./...","status":"completed"}}`,
		`{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"It builds."}}`,
		`{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"output_tokens":3}}`,
	} {
		evs, err := d.decode([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	want := []agents.TurnEvent{
		{Type: agents.EventSession, ID: "th1"},
		{Type: agents.EventThinking, Text: "**Checking the build first**"},
		{Type: agents.EventMessage, Text: "Checking the build."},
		{Type: agents.EventTool, Phase: agents.PhaseStart, Name: "shell: go build ./..."},
		{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: "shell: go build ./..."},
		{Type: agents.EventFinal, Text: "It builds."},
	}
	if !slices.EqualFunc(got, want, eventEqual) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

// TestSessionLostOnlyBeforeTheSessionStarts: a resume whose session is gone
// ends with "No conversation found" before any init (Claude Code) or "no
// rollout found" with no thread.started (Codex): the session is lost. The
// same words once the session started are an error of the turn, never a
// lost session (which would start the request over in a new one).
func TestSessionLostOnlyBeforeTheSessionStarts(t *testing.T) {
	gone := `{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["No conversation found with session ID: s1"],"session_id":"s1"}`
	_, err := (&claudeDecoder{}).decode([]byte(gone))
	if !errors.Is(err, agents.ErrSessionLost) {
		t.Errorf("claude, before an init: %v; want ErrSessionLost", err)
	}
	d := &claudeDecoder{}
	if _, err := d.decode([]byte(`{"type":"system","subtype":"init","session_id":"s1"}`)); err != nil {
		t.Fatal(err)
	}
	if evs, err := d.decode([]byte(gone)); err != nil || len(evs) != 1 || evs[0].Type != agents.EventError {
		t.Errorf("claude, after an init: %+v, %v; want the turn's error", evs, err)
	}

	stderr := "Error: no rollout found for thread id th1"
	if err := (&codexDecoder{session: "th1"}).end(stderr); !errors.Is(err, agents.ErrSessionLost) {
		t.Errorf("codex, no thread.started: %v; want ErrSessionLost", err)
	}
	c := &codexDecoder{}
	if _, err := c.decode([]byte(`{"type":"thread.started","thread_id":"th1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.end(stderr); err != nil {
		t.Errorf("codex, after thread.started: %v; want nothing", err)
	}
}
