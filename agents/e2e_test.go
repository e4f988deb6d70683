package agents_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/requests"
)

// The end-to-end tests run the real bridge binary, built once.
var (
	buildOnce sync.Once
	bridgeBin string
	buildErr  error
)

func bridgeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agents-e2e")
		if err != nil {
			buildErr = err
			return
		}
		bridgeBin = filepath.Join(dir, "bridge")
		out, err := exec.Command("go", "build", "-o", bridgeBin, "../cmd/bridge").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building bridge: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bridgeBin
}

// bridgeProc is a running `bridge run` whose console is driven through its
// stdin and read from its stdout.
type bridgeProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu     sync.Mutex
	lines  []string
	stderr strings.Builder
	change chan struct{}
	done   chan struct{}
}

func startBridge(t *testing.T, dir, config string, env ...string) *bridgeProc {
	t.Helper()
	cmd := exec.Command(bridgeBinary(t), "run", "--config", config)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	p := &bridgeProc{t: t, cmd: cmd, change: make(chan struct{}), done: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stderr.Write(b)
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.change)
			p.change = make(chan struct{})
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("bridge stdout:\n%s\nstderr:\n%s", strings.Join(p.lines, "\n"), p.stderr.String())
			p.mu.Unlock()
		}
	})
	return p
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (p *bridgeProc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// waitLine waits until a stdout line matches re.
func (p *bridgeProc) waitLine(re string) string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(30 * time.Second)
	for i := 0; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if rx.MatchString(p.lines[i]) {
				l := p.lines[i]
				p.mu.Unlock()
				return l
			}
		}
		ch := p.change
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.done:
			p.t.Fatalf("bridge exited before a line matched %q", re)
		case <-deadline:
			p.t.Fatalf("no line matched %q within 30s", re)
		}
	}
}

func (p *bridgeProc) count(substr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// get reads a JSON resource of the daemon's API.
func get(t *testing.T, dataDir, path string, v any) {
	t.Helper()
	addr, err1 := os.ReadFile(filepath.Join(dataDir, "http.addr"))
	tok, err2 := os.ReadFile(filepath.Join(dataDir, "api.token"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+strings.TrimSpace(string(addr))+path, nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestBridgeKilledMidRequest: SIGKILL the bridge while a request runs and
// start it again: the same request continues with the same session (the
// demo agent records the session it was resumed with), the agent process of
// the killed bridge does not work on next to it, and the thread gets exactly
// one final answer.
func TestBridgeKilledMidRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	log, gate := filepath.Join(dir, "demo.log"), filepath.Join(dir, "gate")
	bin := bridgeBinary(t)
	config := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`owner: acme
owners: [console:alice]
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
rooms:
  - {name: main, console: true, agents: [coder, slow]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
  slow: {kind: exec, command: [%q, demo-agent], turn_timeout: 500ms}
`, data, bin, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, log: log}
	env := []string{"DEMO_AGENT_LOG=" + log}

	p := startBridge(t, dir, config, env...)
	p.send("@coder say working; tool work " + gate + "; echo finished")
	line := p.waitLine(`^\* R\d{8}-01 → coder \(approved\)$`)
	id := strings.Fields(line)[1]
	e.waitLog("tool start " + id + " work")
	var session string
	for _, l := range e.logLines() {
		if s, ok := strings.CutPrefix(l, "session "+id+" "); ok {
			session = s
		}
	}
	if session == "" {
		t.Fatalf("no session in the log: %q", e.logLines())
	}
	// The agent wrote its session before its tool; the kill comes once the
	// bridge has stored it (it reads the agent's lines a little later).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var r requests.Request
		get(t, data, "/v1/requests/"+id, &r)
		if r.Session == session {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not store session %q within 30s: %+v", session, r)
		}
	}
	pid := agentPID(t, e, id)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	// The killed bridge's agent does not work on unsupervised.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent process %d outlived the killed bridge", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}

	q := startBridge(t, dir, config, env...)
	e.waitLog("resumed session " + session + " for " + id)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q.waitLine(regexp.QuoteMeta(id + " | final: finished"))
	q.waitLine(regexp.QuoteMeta(id + " | status: done"))

	if n := p.count(id+" | final:") + q.count(id+" | final:"); n != 1 {
		t.Errorf("%d final answers in the thread, want 1", n)
	}
	var finals, ends int
	for _, l := range e.logLines() {
		finals += boolInt(l == "final "+id)
		ends += boolInt(l == "tool end "+id+" work")
	}
	if finals != 1 || ends != 1 {
		t.Errorf("the agent ended its tool %d times and answered %d times (want 1 and 1: the killed bridge's agent died with it):\n%s",
			ends, finals, strings.Join(e.logLines(), "\n"))
	}
	var list struct{ Requests []requests.Request }
	get(t, data, "/v1/requests", &list)
	if all := list.Requests; len(all) != 1 || all[0].ID.String() != id || all[0].State != requests.Done || all[0].Session != session {
		t.Errorf("requests after the restart: %+v", list.Requests)
	}

	// A turn over the configured agents.slow.turn_timeout fails, and says so
	// in the thread.
	q.send("@slow sleep 30s; echo late")
	slow := strings.Fields(q.waitLine(`^\* R\d{8}-02 → slow`))[1]
	q.waitLine(regexp.QuoteMeta(slow + " | final: failed: turn timed out after 500ms"))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// agentPID is the process ID of request id's first turn, from the demo log.
func agentPID(t *testing.T, e *env, id string) int {
	t.Helper()
	for _, l := range e.logLines() {
		if strings.HasPrefix(l, "turn "+id+" ") {
			var pid int
			if _, err := fmt.Sscanf(l[strings.LastIndex(l, "pid="):], "pid=%d", &pid); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no turn of %s in the log", id)
	return 0
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
