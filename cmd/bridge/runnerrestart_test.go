package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/requests"
)

// TestRunnerRestartResumes: the runner process is SIGKILLed mid-turn (its
// agent dies with it: no orphan) and a new runner process starts with the
// same config and token; its hello lists no live turn, so the bridge
// starts the turn again there with the same session and resumed true.
// The room is told "resumed HH:MM on runner laptop" once, and the request
// ends with one final answer. Past the grace the turn is first marked
// interrupted (the room told once); within it nothing says it went away.
func TestRunnerRestartResumes(t *testing.T) {
	for _, tc := range []struct {
		name, grace string
		past        bool
	}{{"past the grace", "1s", true}, {"within the grace", "20s", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bridge, rdir := runnerBridge(t, dir, tc.grace, "")
			base, token := bridge.api(filepath.Join(dir, "data"))
			addRunner(t, dir, rdir, "")
			writeFile(t, filepath.Join(rdir, "runner.yaml"), fmt.Sprintf(`runner: {name: laptop, bridges: [%s], token_file: token}
agents:
  coder: {kind: exec, command: [%q, demo-agent], workdir: .}
`, base, bridgeBin))
			alog, gate := filepath.Join(dir, "agent.log"), filepath.Join(dir, "gate")
			env := []string{"DEMO_AGENT_LOG=" + alog}
			runner := startBinary(t, bridgeBin, rdir, env, "runner", "--config", "runner.yaml")
			waitRunner(t, base, token, "connected")

			bridge.send("@coder say working; await " + gate + "; echo finished")
			var id, session string
			var pid int
			bridge.poll("the turn has its session", func() bool {
				b, _ := os.ReadFile(alog)
				m := regexp.MustCompile(`turn (\S+) session="" resumed=false inputs=\d+ pid=(\d+)\n.* session (\S+) (\S+)\n`).FindSubmatch(b)
				if m == nil {
					return false
				}
				id, session = string(m[1]), string(m[4])
				_, _ = fmt.Sscan(string(m[2]), &pid)
				return true
			})
			stored := func(ok func(*requests.Request) bool) func() bool {
				return func() bool {
					var r requests.Request
					c, err := apiCall(http.MethodGet, base+"/v1/requests/"+id, token, nil, &r)
					return err == nil && c == http.StatusOK && ok(&r)
				}
			}
			bridge.poll("the store has the session", stored(func(r *requests.Request) bool { return r.Session == session }))
			i := bridge.waitLine(0, `working`)

			if err := runner.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-runner.done
			bridge.poll("the old agent is gone with its runner", func() bool { return !alive(pid) })
			waitRunner(t, base, token, map[bool]string{true: "away", false: "disconnected"}[tc.past])
			if tc.past {
				i = bridge.waitLine(i, `runner laptop went away at \d\d:\d\d .*: its turns resume`)
				bridge.poll("the turn is marked interrupted", stored(func(r *requests.Request) bool {
					return strings.HasPrefix(r.Activity, "interrupted: runner laptop went away at ")
				}))
			}
			writeFile(t, gate, "")

			startBinary(t, bridgeBin, rdir, env, "runner", "--config", "runner.yaml")
			bridge.waitLine(i, `final: finished`)
			bridge.poll("the request is done with its session", stored(func(r *requests.Request) bool {
				return r.State == requests.Done && r.Session == session && r.Result == "finished"
			}))
			all := strings.Join(bridge.Lines(), "\n")
			if n := countLog(t, alog, `turn `+regexp.QuoteMeta(id)+` session="`+regexp.QuoteMeta(session)+`" resumed=true `); n != 1 {
				t.Fatalf("the new runner started the turn %d times with session %s and resumed true, want once:\n%s", n, session, readLog(t, alog))
			}
			if n := countLog(t, alog, `turn `); n != 2 {
				t.Fatalf("%d turns started, want 2 (the first, the resumed):\n%s", n, readLog(t, alog))
			}
			for re, want := range map[string]int{
				`resumed \d\d:\d\d on runner laptop`:              1,
				`final: finished`:                                 1,
				`went away at .*: its turns resume`:               map[bool]int{true: 1, false: 0}[tc.past],
				`runner laptop has not connected since \d\d:\d\d`: 0,
			} {
				if n := linesMatching(bridge, re); n != want {
					t.Fatalf("%d lines match %q, want %d:\n%s", n, re, want, all)
				}
			}
		})
	}
}

// alive tells whether process pid runs (a zombie waiting to be reaped
// has ended).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	return string(b)
}
