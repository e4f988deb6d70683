package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// TestRunnerLeaderFailover: two bridges on one etcd, agent coder on a
// runner that knows both. The leader is SIGKILLed while the runner's turn
// runs: the runner keeps its process, connects to the new leader, which
// adopts the turn (no second start); the answer lands once.
func TestRunnerLeaderFailover(t *testing.T) {
	srv := etcdtest.Start(t)
	var bs []*haBridge
	for range 2 {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "bridge.yaml")
		writeFile(t, cfg, fmt.Sprintf(`owner: acme
data_dir: %s
http: {addr: "127.0.0.1:0"}
console: {user: alice}
rooms:
  - {name: main, console: true, agents: [coder]}
agents:
  coder: {kind: runner, runner: laptop}
runners: {grace: 20s, heartbeat: 200ms}
ha: {etcd: [%q], lease_ttl: %s, prefix: /rb}
`, filepath.Join(dir, "data"), srv.Endpoint(), haLeaseTTL))
		bs = append(bs, &haBridge{t: t, p: startBridge(t, dir, nil, "run", "--config", cfg), data: filepath.Join(dir, "data")})
	}
	for _, b := range bs {
		b.base, b.token = b.p.api(b.data)
	}
	leader := waitLeader(t, bs, 30*time.Second)
	var tok struct{ Token string }
	if code := call(t, http.MethodPost, leader.base+"/v1/runners", leader.token, map[string]string{"name": "laptop"}, &tok); code != http.StatusOK {
		t.Fatalf("runners add: HTTP %d", code)
	}
	rdir := t.TempDir()
	gate := filepath.Join(rdir, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	writeFile(t, filepath.Join(rdir, "token"), tok.Token)
	writeFile(t, filepath.Join(rdir, "agent.sh"), `read turn
echo '{"type":"session","id":"s-9"}'
echo '{"type":"message","text":"started on the runner"}'
while [ ! -e `+gate+` ]; do sleep 0.02; done
echo '{"type":"final","text":"answer after failover"}'
`)
	writeFile(t, filepath.Join(rdir, "runner.yaml"), fmt.Sprintf(`runner: {name: laptop, bridges: [%s, %s], token_file: token}
agents:
  coder: {kind: exec, command: [sh, agent.sh], workdir: .}
`, bs[0].base, bs[1].base))
	runner := startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "runner.yaml")
	waitRunner(t, leader.base, leader.token, "connected")
	r := leader.create("@coder go")
	leader.waitRequest(r.ID, "with its session", 30*time.Second, func(r requests.Request) bool { return r.Session == "s-9" })
	if err := leader.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.p.done
	next := waitLeader(t, bs, 30*time.Second)
	waitRunner(t, next.base, next.token, "connected")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := next.waitRequest(r.ID, "done", 30*time.Second, func(r requests.Request) bool { return r.State == requests.Done })
	if done.Result != "answer after failover" || done.Session != "s-9" {
		t.Fatalf("result %q session %q, want the runner's answer in the same session", done.Result, done.Session)
	}
	if n := strings.Count(runner.Stderr(), "runner: turn starting"); n != 1 {
		t.Fatalf("the runner started the turn %d times, want once (adopted, not restarted):\n%s", n, runner.Stderr())
	}
	next.p.waitLine(0, "final: answer after failover") // the outbox posts it after the request is done
	if n := countLines(bs, "final: answer after failover"); n != 1 {
		t.Fatalf("the answer was posted %d times, want once", n)
	}
}
