package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/tcpcut"
)

// TestRunnerRebootReplacesDeadConnection: the runner's machine loses
// power mid-turn (its connection stays open and silent: the proxy
// freezes it, and the runner process is SIGKILLed); the machine's new
// runner process connects at once. The bridge probes the dead connection
// and, with no answer within the probe's 2 s, drops it and accepts the
// new process long before the grace (20 s) would have: the turn resumes
// there and ends with one answer. A refusal ("already connected") would
// have stopped the new process before.
func TestRunnerRebootReplacesDeadConnection(t *testing.T) {
	dir := t.TempDir()
	bridge, rdir := runnerBridge(t, dir, "20s", "")
	base, token := bridge.api(filepath.Join(dir, "data"))
	addRunner(t, dir, rdir, `read turn
echo '{"type":"session","id":"s-1"}'
echo '{"type":"message","text":"working"}'
while [ ! -e gate ]; do sleep 0.05; done
echo '{"type":"final","text":"finished"}'
`)
	proxy := tcpcut.New(t, strings.TrimPrefix(base, "http://"))
	config := func(file, url string) {
		writeFile(t, filepath.Join(rdir, file), fmt.Sprintf(`runner: {name: laptop, bridges: [%s], token_file: token}
agents:
  coder: {kind: exec, command: [sh, agent.sh], workdir: .}
`, url))
	}
	config("old.yaml", proxy.URL())
	config("new.yaml", base)
	old := startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "old.yaml")
	waitRunner(t, base, token, "connected")
	bridge.send("@coder go")
	i := bridge.waitLine(0, `working`)

	proxy.Freeze() // the power is gone: no FIN, no RST reaches the bridge
	if err := old.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-old.done
	writeFile(t, filepath.Join(rdir, "gate"), "")
	start := time.Now()
	startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "new.yaml")
	if got := bridge.waitStderr("did not answer a probe", "already connected"); got != "did not answer a probe" {
		t.Fatalf("the bridge's answer to the new process: %q, want the dead connection replaced after its probe:\n%s", got, bridge.Stderr())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the new process got in after %v, want within the probe (2 s), far within the grace (20 s)", took)
	}
	bridge.waitLine(i, `final: finished`)
	for re, want := range map[string]int{`resumed \d\d:\d\d on runner laptop`: 1, `final: finished`: 1, `went away`: 0} {
		if n := linesMatching(bridge, re); n != want {
			t.Fatalf("%d lines match %q, want %d:\n%s", n, re, want, strings.Join(bridge.Lines(), "\n"))
		}
	}
}
