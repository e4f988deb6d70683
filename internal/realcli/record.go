package realcli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:generate sh -c "rm -rf ../../testdata/claude/recorded ../../testdata/codex/recorded && ROOMBRIDGE_RECORD=$(pwd)/../../testdata go test -count 1 -run 'Test(Claude|Codex)' ."

// RecordEnv, set to a testdata folder, makes the real-CLI tests record
// what each CLI prints (stdout, then stderr after a "# stderr" line) in
// DIR/<cli>/recorded/<test>.jsonl, each file headed by the CLI version:
// the fixtures of the decoders' tests. `go generate ./internal/realcli`
// records them anew.
const RecordEnv = "ROOMBRIDGE_RECORD"

var cliName = map[string]string{"claude": "Claude Code", "codex": "Codex CLI"}

// Recorder returns a command that runs command (the CLI and its flags) and
// appends what it prints to the recording of test; its wrapper script is
// written in scratch.
func Recorder(dir, scratch, kind, test string, command []string) ([]string, error) {
	out := filepath.Join(dir, kind, "recorded", strings.NewReplacer("/", "_", " ", "_").Replace(test)+".jsonl")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(out); os.IsNotExist(err) {
		head := fmt.Sprintf("# recorded from %s %s (npm %s) by %s: go generate ./internal/realcli\n",
			cliName[kind], strings.TrimPrefix(Versions[kind][strings.LastIndex(Versions[kind], "@"):], "@"), Versions[kind], test)
		if err := os.WriteFile(out, []byte(head), 0o644); err != nil {
			return nil, err
		}
	}
	// One turn: a "# turn started" line, its stdout lines, then its
	// stderr in "# stderr: " lines (the decoders skip lines that are not
	// JSON). A script file: the CLI's runtime puts its own arguments after
	// the command's first word. The tees run in their own sessions: the
	// bridge kills the CLI's process group on a failure, and the recording
	// keeps the lines up to it.
	script := fmt.Sprintf(`#!/usr/bin/env bash
rec=%q
err=$(mktemp)
echo "# turn started" >>"$rec"
%q "$@" 2> >(setsid tee "$err" >&2) | setsid tee -a "$rec"
st=${PIPESTATUS[0]}
wait $! 2>/dev/null
sed 's/^/# stderr: /' "$err" >>"$rec"
rm -f "$err"
exit "$st"
`, out, command[0])
	wrapper := filepath.Join(scratch, "record-"+kind+".sh")
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return nil, err
	}
	return append([]string{wrapper}, command[1:]...), nil
}
