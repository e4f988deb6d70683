package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/tcpcut"
)

// runnerSetup starts a bridge whose agent coder is hosted by runner
// laptop, registers the runner, and starts `bridge runner` as its own
// process with agent script.
func runnerSetup(t *testing.T, script string) (bridge, runner *proc, base, token string) {
	t.Helper()
	return runnerVia(t, script, "2s", func(base string) string { return base })
}

// runnerVia is runnerSetup with the runners' grace, and the runner
// reaching the bridge at via(base).
func runnerVia(t *testing.T, script, grace string, via func(base string) string) (bridge, runner *proc, base, token string) {
	t.Helper()
	dir := t.TempDir()
	bridge, rdir := runnerBridge(t, dir, grace, "")
	base, token = bridge.api(filepath.Join(dir, "data"))
	addRunner(t, dir, rdir, script)
	writeFile(t, filepath.Join(rdir, "runner.yaml"), fmt.Sprintf(`runner: {name: laptop, bridges: [%s], token_file: token}
agents:
  coder: {kind: exec, command: [sh, agent.sh], workdir: .}
`, via(base)))
	runner = startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "runner.yaml")
	waitRunner(t, base, token, "connected")
	return bridge, runner, base, token
}

// runnerBridge starts a bridge in dir (config bridge.yaml, data dir data)
// whose agent coder is hosted by runner laptop, with the runners' grace
// and httpKeys added to its http section; rdir is the runner's directory.
func runnerBridge(t *testing.T, dir, grace, httpKeys string) (bridge *proc, rdir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "bridge.yaml"), fmt.Sprintf(`owner: acme
owners: [console:alice]
data_dir: %s
http: {addr: "127.0.0.1:0"%s}
console: {user: alice}
rooms:
  - {name: main, console: true, agents: [coder]}
agents:
  coder: {kind: runner, runner: laptop}
runners: {grace: %s, heartbeat: 200ms}
`, filepath.Join(dir, "data"), httpKeys, grace))
	return startBridge(t, dir, nil, "run", "--config", filepath.Join(dir, "bridge.yaml")), filepath.Join(dir, "laptop")
}

// addRunner registers runner laptop with the CLI (`bridge runners add`,
// the bridge's config in dir) and writes its token and agent script in
// rdir.
func addRunner(t *testing.T, dir, rdir, script string) {
	t.Helper()
	out, errOut, code := runCLI(t, dir, "runners", "add", "--config", filepath.Join(dir, "bridge.yaml"), "laptop")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || !strings.HasPrefix(lines[len(lines)-1], "rnr_") {
		t.Fatalf("runners add: %d %q %q", code, out, errOut)
	}
	if err := os.MkdirAll(rdir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(rdir, "token"), lines[len(lines)-1]+"\n")
	writeFile(t, filepath.Join(rdir, "agent.sh"), script)
}

// waitRunner waits until laptop's state (runners list) is state.
func waitRunner(t *testing.T, base, token, state string) {
	t.Helper()
	waitRunnerVia(t, http.DefaultClient, base, token, state)
}

// waitRunnerVia is waitRunner with the API client hc.
func waitRunnerVia(t *testing.T, hc *http.Client, base, token, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var st []struct {
			Name      string
			Connected bool
			Away      bool
		}
		if code, err := apiCallVia(hc, http.MethodGet, base+"/v1/runners", token, nil, &st); err != nil {
			t.Fatal(err)
		} else if code == http.StatusOK && len(st) == 1 {
			if got := map[bool]string{true: "connected", false: "disconnected"}[st[0].Connected]; got == state || (state == "away" && st[0].Away) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("runner laptop never %s", state)
}

func linesMatching(p *proc, re string) int {
	rx := regexp.MustCompile(re)
	n := 0
	for _, l := range p.Lines() {
		if rx.MatchString(l) {
			n++
		}
	}
	return n
}

// TestRunnerHostsTheTurn: a request for the runner's agent runs on the
// runner: the agent process is the runner's child, not the bridge's.
func TestRunnerHostsTheTurn(t *testing.T) {
	bridge, runner, _, _ := runnerSetup(t, `read turn
echo "{\"type\":\"message\",\"text\":\"parent $PPID\"}"
echo '{"type":"final","text":"all good"}'
`)
	bridge.send("@coder go")
	i := bridge.waitLine(0, `parent \d+`)
	ppid, _ := strconv.Atoi(regexp.MustCompile(`parent (\d+)`).FindStringSubmatch(bridge.Lines()[i])[1])
	if ppid != runner.cmd.Process.Pid || ppid == bridge.cmd.Process.Pid {
		t.Fatalf("the agent's parent is %d; want the runner %d (the bridge is %d)", ppid, runner.cmd.Process.Pid, bridge.cmd.Process.Pid)
	}
	bridge.waitLine(i, `all good`)
}

// TestRunnerSleepAndWake: SIGSTOP of the runner (a lid closed) past the
// grace interrupts its turn and tells the room once; SIGCONT re-attaches
// the live turn, which ends with one final answer.
func TestRunnerSleepAndWake(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	bridge, runner, base, token := runnerSetup(t, `read turn
echo '{"type":"session","id":"s-7"}'
echo '{"type":"message","text":"started"}'
while [ ! -e `+gate+` ]; do sleep 0.02; done
echo '{"type":"final","text":"woke and finished"}'
`)
	bridge.send("@coder go")
	i := bridge.waitLine(0, `started`)
	if err := runner.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	i = bridge.waitLine(i, `runner laptop went away at \d\d:\d\d`)
	waitRunner(t, base, token, "away")
	if err := runner.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitRunner(t, base, token, "connected")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bridge.waitLine(i, `woke and finished`)
	if n := linesMatching(bridge, `went away at .*: its turns resume`); n != 1 {
		t.Fatalf("the room was told %d times that the runner went away, want once:\n%s", n, strings.Join(bridge.Lines(), "\n"))
	}
	if n := linesMatching(bridge, `woke and finished`); n != 1 {
		t.Fatalf("%d final answers, want one:\n%s", n, strings.Join(bridge.Lines(), "\n"))
	}
	if n := linesMatching(bridge, `started`); n != 1 {
		t.Fatalf("the turn started %d times, want once (re-attached, not restarted)", n)
	}
}

// TestRunnerNetworkCut: a cut shorter than the grace is not seen in the
// room (no interruption, the turn started once, one final answer); a cut
// longer than it is as a sleep (the room told once).
func TestRunnerNetworkCut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace string
		long  bool
	}{{"shorter", "20s", false}, {"longer", "1s", true}} {
		t.Run(tc.name, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
			var proxy *tcpcut.Proxy
			bridge, _, base, token := runnerVia(t, `read turn
echo '{"type":"message","text":"started"}'
while [ ! -e `+gate+` ]; do sleep 0.02; done
echo '{"type":"message","text":"after the cut"}'
echo '{"type":"final","text":"finished"}'
`, tc.grace, func(base string) string {
				proxy = tcpcut.New(t, strings.TrimPrefix(base, "http://"))
				return proxy.URL()
			})
			bridge.send("@coder go")
			i := bridge.waitLine(0, `started`)
			proxy.Cut()
			waitRunner(t, base, token, map[bool]string{true: "away", false: "disconnected"}[tc.long])
			if tc.long {
				i = bridge.waitLine(i, `went away at .*: its turns resume`)
			}
			proxy.Heal()
			waitRunner(t, base, token, "connected")
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			bridge.waitLine(i, `final: finished`)
			all := strings.Join(bridge.Lines(), "\n")
			want := map[bool]int{true: 1, false: 0}[tc.long]
			if n := linesMatching(bridge, `went away at .*: its turns resume`); n != want {
				t.Fatalf("the room was told %d times the runner went away, want %d:\n%s", n, want, all)
			}
			for _, re := range []string{`\| started$`, `after the cut`, `final: finished`} {
				if n := linesMatching(bridge, re); n != 1 {
					t.Fatalf("%d lines match %q, want 1 (no duplicate event):\n%s", n, re, all)
				}
			}
		})
	}
}
