package process

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/agents"
)

// Fuzz targets of what agent processes print on stdout: the exec protocol's
// event lines and the claude and codex stream-json lines. Each runs the
// fuzzed output through the real reader (driver.read: line splitting, the
// line bound, blank lines, stopping at the first bad line) and decoder,
// through a pipe as from a process. Seeds: testdata/fuzz/<target>/, from
// docs/agent-protocol.md's examples and the recorded streams in
// ../../testdata/{claude,codex}.

// fuzzMaxLine is the line bound of the fuzzed reader: small, so the fuzzer
// reaches the too-long path with small inputs.
const fuzzMaxLine = 4096

// readAll feeds out to dec through driver.read and returns the events and the
// errors it reports.
func readAll(t *testing.T, dec decoder, out []byte) ([]agents.TurnEvent, []error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = w.Write(out)
		_ = w.Close()
	}()
	d := &driver{p: &process{dec: dec, maxLine: fuzzMaxLine}}
	items := make(chan item)
	go d.read(r, items)
	var evs []agents.TurnEvent
	var errs []error
	for it := range items {
		if it.err != nil {
			errs = append(errs, it.err)
			continue
		}
		if len(errs) > 0 {
			t.Fatalf("event %+v after the error %v", it.ev, errs[0])
		}
		evs = append(evs, it.ev)
	}
	if len(errs) > 1 {
		t.Fatalf("%d errors, want at most one: %v", len(errs), errs)
	}
	if len(errs) == 1 && !errors.Is(errs[0], agents.ErrProtocol) {
		t.Fatalf("error %v is not a protocol error", errs[0])
	}
	_ = dec.partial()
	return evs, errs
}

// nonBlankLines counts the lines of out that are not blank.
func nonBlankLines(out []byte) int {
	n := 0
	for line := range bytes.SplitSeq(out, []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			n++
		}
	}
	return n
}

// FuzzExecLines: every line an exec agent prints is one event with a type,
// or the first line that is not ends the reading with a protocol error.
func FuzzExecLines(f *testing.F) {
	f.Fuzz(func(t *testing.T, out []byte) {
		evs, errs := readAll(t, execDecoder{}, out)
		for _, ev := range evs {
			if ev.Type == "" {
				t.Fatalf("event without a type: %+v", ev)
			}
		}
		lines := nonBlankLines(out)
		if len(errs) == 0 && len(evs) != lines {
			t.Fatalf("%d events of %d lines", len(evs), lines)
		}
		if len(errs) == 1 && len(evs) >= lines {
			t.Fatalf("%d events of %d lines, and the error %v", len(evs), lines, errs[0])
		}
	})
}

// checkCLIEvents holds for the events a CLI adapter makes: session events
// name a new session, tools end only after they started, progress is a
// percentage, errors name the CLI.
func checkCLIEvents(t *testing.T, cli, session string, evs []agents.TurnEvent) {
	t.Helper()
	open := map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case agents.EventSession:
			if ev.ID == "" || ev.ID == session {
				t.Fatalf("session event %q after session %q", ev.ID, session)
			}
			session = ev.ID
		case agents.EventTool:
			switch ev.Phase {
			case agents.PhaseStart:
				open[ev.Name]++
			case agents.PhaseEnd:
				if open[ev.Name] == 0 {
					t.Fatalf("tool %q ends but did not start", ev.Name)
				}
				open[ev.Name]--
			default:
				t.Fatalf("tool phase %q", ev.Phase)
			}
		case agents.EventProgress:
			if ev.Percent < 0 || ev.Percent > 100 {
				t.Fatalf("progress %d%%", ev.Percent)
			}
		case agents.EventError:
			if !strings.HasPrefix(ev.Message, cli+": ") {
				t.Fatalf("error %q does not name %s", ev.Message, cli)
			}
		case agents.EventMessage, agents.EventFinal, evStatus:
		default:
			t.Fatalf("%s adapter made a %q event", cli, ev.Type)
		}
	}
}

// FuzzClaudeLines reads claude -p --output-format stream-json output,
// continuing session (empty: a first turn).
func FuzzClaudeLines(f *testing.F) {
	f.Fuzz(func(t *testing.T, session string, out []byte) {
		evs, _ := readAll(t, &claudeDecoder{session: session}, out)
		checkCLIEvents(t, "claude", session, evs)
	})
}

// FuzzCodexLines reads codex exec --json output, continuing session (empty:
// a first turn).
func FuzzCodexLines(f *testing.F) {
	f.Fuzz(func(t *testing.T, session string, out []byte) {
		evs, _ := readAll(t, &codexDecoder{session: session}, out)
		checkCLIEvents(t, "codex", session, evs)
	})
}
