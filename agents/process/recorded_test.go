package process

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/agents"
)

// The fixtures recorded from the real CLIs by the tests of internal/realcli
// (go generate ./internal/realcli): testdata/<cli>/recorded/<test>.jsonl,
// each headed by the CLI version, one turn after another ("# turn
// started"), each turn's stderr after it in "# stderr: " lines.

// recordedTurn is one turn of a recording.
type recordedTurn struct {
	stdout [][]byte
	stderr string
}

func readRecording(t *testing.T, path string) (head string, turns []recordedTurn) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(b, []byte("\n"))
	head = string(lines[0])
	for _, l := range lines[1:] {
		switch {
		case bytes.Equal(l, []byte("# turn started")):
			turns = append(turns, recordedTurn{})
		case len(turns) == 0 || len(bytes.TrimSpace(l)) == 0:
		case bytes.HasPrefix(l, []byte("# stderr: ")):
			turns[len(turns)-1].stderr += string(l[len("# stderr: "):]) + "\n"
		default:
			turns[len(turns)-1].stdout = append(turns[len(turns)-1].stdout, l)
		}
	}
	return head, turns
}

// decodeRecording decodes each turn of a recording with a fresh decoder of
// cli; a turn's end judgement (ender) is its last "event".
func decodeRecording(t *testing.T, cli, path string) (evs []agents.TurnEvent, errs []error) {
	head, turns := readRecording(t, path)
	want := map[string]string{"claude": "Claude Code 2.1.328", "codex": "Codex CLI 0.169.0"}[cli]
	if !strings.Contains(head, want) {
		t.Errorf("%s: the header %q does not name %s", path, head, want)
	}
	for _, turn := range turns {
		var dec decoder = &claudeDecoder{agent: "agent"}
		if cli == "codex" {
			dec = &codexDecoder{agent: "agent"}
		}
		for _, l := range turn.stdout {
			e, err := dec.decode(l)
			if err != nil {
				errs = append(errs, err)
				break
			}
			evs = append(evs, e...)
		}
		if en, ok := dec.(ender); ok {
			if err := en.end(turn.stderr); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return evs, errs
}

func TestRecordedFixtures(t *testing.T) {
	checks := map[string]func(evs []agents.TurnEvent, errs []error) string{
		"claude/recorded/TestClaudePlainAnswer.jsonl":        final("four"),
		"claude/recorded/TestClaudeBuiltinTool.jsonl":        tool("Read"),
		"claude/recorded/TestClaudeSessionLost.jsonl":        lost,
		"claude/recorded/TestClaudeModelAPIErrors_401.jsonl": errorWith("claude: model API: authentication_failed (401): the credentials of agent agent were refused"),
		"claude/recorded/TestClaudeModelAPIErrors_529.jsonl": status("model API: overloaded (529), retry 1/2"),
		"claude/recorded/TestClaudePermission_deny.jsonl":    message("Claude Code was not permitted to use: Bash"),
		"codex/recorded/TestCodexPlainAnswer.jsonl":          final("four"),
		"codex/recorded/TestCodexBuiltinTool.jsonl":          tool("shell: "),
		"codex/recorded/TestCodexAskAgent.jsonl":             tool("mcp: roombridge.ask_agent"),
		"codex/recorded/TestCodexFailedToolCall.jsonl":       message("(mcp: roombridge.ask_agent failed: "),
		"codex/recorded/TestCodexSessionLost.jsonl":          lost,
		"codex/recorded/TestCodexModelAPIErrors_400.jsonl":   errorWith("codex: model API: input is bad"),
		"codex/recorded/TestCodexModelAPIErrors_401.jsonl":   errorWith("codex: model API: 401 Incorrect API key provided: the credentials of agent agent"),
		"codex/recorded/TestCodexModelAPIErrors_529.jsonl":   status("model API: 529 Overloaded, retry 1/1"),
	}
	for _, cli := range []string{"claude", "codex"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", cli, "recorded", "*.jsonl"))
		if len(files) == 0 {
			t.Fatalf("no recorded %s fixtures", cli)
		}
		for _, f := range files {
			evs, errs := decodeRecording(t, cli, f)
			for _, err := range errs {
				if errors.Is(err, agents.ErrProtocol) {
					t.Errorf("%s: %v", f, err)
				}
			}
			name := cli + "/recorded/" + filepath.Base(f)
			if check := checks[name]; check != nil {
				if msg := check(evs, errs); msg != "" {
					t.Errorf("%s: %s\nevents %+v\nerrors %v", name, msg, evs, errs)
				}
				delete(checks, name)
			}
		}
	}
	for name := range checks {
		t.Errorf("no recording %s", name)
	}
}

func has(evs []agents.TurnEvent, f func(agents.TurnEvent) bool) bool {
	for _, e := range evs {
		if f(e) {
			return true
		}
	}
	return false
}

func final(text string) func([]agents.TurnEvent, []error) string {
	return func(evs []agents.TurnEvent, _ []error) string {
		if !has(evs, func(e agents.TurnEvent) bool { return e.Type == agents.EventFinal && e.Text == text }) {
			return "no final answer " + text
		}
		if !has(evs, func(e agents.TurnEvent) bool { return e.Type == agents.EventSession && e.ID != "" }) {
			return "no session"
		}
		return ""
	}
}

func tool(prefix string) func([]agents.TurnEvent, []error) string {
	return func(evs []agents.TurnEvent, _ []error) string {
		if !has(evs, func(e agents.TurnEvent) bool {
			return e.Type == agents.EventTool && e.Phase == agents.PhaseEnd && strings.HasPrefix(e.Name, prefix)
		}) {
			return "no tool end " + prefix
		}
		return ""
	}
}

func lost(_ []agents.TurnEvent, errs []error) string {
	for _, err := range errs {
		if errors.Is(err, agents.ErrSessionLost) {
			return ""
		}
	}
	return "no lost session"
}

func errorWith(prefix string) func([]agents.TurnEvent, []error) string {
	return func(evs []agents.TurnEvent, _ []error) string {
		if !has(evs, func(e agents.TurnEvent) bool {
			return e.Type == agents.EventError && strings.HasPrefix(e.Message, prefix)
		}) {
			return "no error " + prefix
		}
		return ""
	}
}

func status(text string) func([]agents.TurnEvent, []error) string {
	return func(evs []agents.TurnEvent, _ []error) string {
		if !has(evs, func(e agents.TurnEvent) bool { return e.Type == evStatus && e.Text == text }) {
			return "no status " + text
		}
		return ""
	}
}

func message(prefix string) func([]agents.TurnEvent, []error) string {
	return func(evs []agents.TurnEvent, _ []error) string {
		if !has(evs, func(e agents.TurnEvent) bool {
			return e.Type == agents.EventMessage && strings.HasPrefix(e.Text, prefix)
		}) {
			return "no message " + prefix
		}
		return ""
	}
}
