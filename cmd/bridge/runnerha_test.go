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

	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// runnerHA starts two bridges on one etcd, agent coder on runner laptop,
// and the runner, which knows both: bs[0] is started first, with env0,
// and leads; bs[1] follows. The runner's agent reports its session and
// the message say, waits for the file gate, and answers "answer after
// failover". It returns the bridges, the runner and the gate.
func runnerHA(t *testing.T, env0 []string, say string) (bs []*haBridge, runner *proc, gate string) {
	t.Helper()
	bs = runnerBridges(t, [][]string{env0, nil})
	runner, gate = startRunner(t, bs[0], say, bs[0].base, bs[1].base)
	return bs, runner, gate
}

// runnerBridges starts a bridge for each of envs on one etcd, agent coder
// on runner laptop; the first leads.
func runnerBridges(t *testing.T, envs [][]string) (bs []*haBridge) {
	t.Helper()
	srv := etcdtest.Start(t)
	for i, env := range envs {
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
		b := &haBridge{t: t, p: startBridge(t, dir, env, "run", "--config", cfg), data: filepath.Join(dir, "data")}
		b.base, b.token = b.p.api(b.data)
		bs = append(bs, b)
		if i == 0 {
			waitLeader(t, bs, 30*time.Second)
		}
	}
	return bs
}

// startRunner registers runner laptop on the leader and starts it with
// the bridge URLs urls; its agent reports its session and the message
// say, waits for the file gate, and answers "answer after failover".
func startRunner(t *testing.T, leader *haBridge, say string, urls ...string) (runner *proc, gate string) {
	t.Helper()
	var tok struct{ Token string }
	if code := call(t, http.MethodPost, leader.base+"/v1/runners", leader.token, map[string]string{"name": "laptop"}, &tok); code != http.StatusOK {
		t.Fatalf("runners add: HTTP %d", code)
	}
	rdir := t.TempDir()
	gate = filepath.Join(rdir, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	writeFile(t, filepath.Join(rdir, "token"), tok.Token)
	writeFile(t, filepath.Join(rdir, "agent.sh"), `read turn
echo '{"type":"session","id":"s-9"}'
echo '{"type":"message","text":"`+say+`"}'
while [ ! -e `+gate+` ]; do sleep 0.02; done
echo '{"type":"final","text":"answer after failover"}'
`)
	writeFile(t, filepath.Join(rdir, "runner.yaml"), fmt.Sprintf(`runner: {name: laptop, bridges: [%s], token_file: token}
agents:
  coder: {kind: exec, command: [sh, agent.sh], workdir: .}
`, strings.Join(urls, ", ")))
	runner = startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "runner.yaml")
	waitRunner(t, leader.base, leader.token, "connected")
	return runner, gate
}

// finishAfterFailover lets the runner's agent answer once bs[1] leads and
// the runner is connected to it, and checks that the request ends there
// adopted (checkAdopted).
func finishAfterFailover(t *testing.T, bs []*haBridge, runner *proc, gate string, id requests.ID) *haBridge {
	t.Helper()
	next := waitLeader(t, bs, 30*time.Second)
	waitRunner(t, next.base, next.token, "connected")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	checkAdopted(t, bs, runner, next, id)
	return next
}

// checkAdopted checks that request id ends done on bridge next with the
// runner's answer, in the same session, the runner having started the
// turn once (adopted, not restarted), the answer posted once.
func checkAdopted(t *testing.T, bs []*haBridge, runner *proc, next *haBridge, id requests.ID) {
	t.Helper()
	done := next.waitRequest(id, "done", 30*time.Second, func(r requests.Request) bool { return r.State == requests.Done })
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

// TestRunnerLeaderFailover: two bridges on one etcd, agent coder on a
// runner that knows both. The leader is SIGKILLed while the runner's turn
// runs: the runner keeps its process, connects to the new leader, which
// adopts the turn (no second start); the answer lands once.
func TestRunnerLeaderFailover(t *testing.T) {
	bs, runner, gate := runnerHA(t, nil, "started on the runner")
	leader := bs[0]
	r := leader.create("@coder go")
	leader.waitRequest(r.ID, "with its session", 30*time.Second, func(r requests.Request) bool { return r.Session == "s-9" })
	if err := leader.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.p.done
	finishAfterFailover(t, bs, runner, gate, r.ID)
}

// TestRunnerFrameInFlightAtFailover: the leader dies with the runner's
// message report in flight, either received and not applied
// (runner_frame_received) or applied and not acknowledged
// (runner_frame_applied): the new leader applies it exactly once (it
// asks the runner for the frames after the last one its store applied),
// and the message is posted once.
func TestRunnerFrameInFlightAtFailover(t *testing.T) {
	for _, fp := range []string{failpoint.FrameReceived, failpoint.FrameApplied} {
		t.Run(fp, func(t *testing.T) {
			const say = "reported as the leader died"
			// Frame 1 is the session, frame 2 the message.
			bs, runner, gate := runnerHA(t, []string{failpoint.EnvVar + "=" + fp + "@2"}, say)
			r := bs[0].create("@coder go")
			select {
			case <-bs[0].p.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the leader never reached %s", fp)
			}
			if !strings.Contains(bs[0].p.Stderr(), "failpoint "+fp+"@2") {
				t.Fatalf("the leader ended, not at %s:\n%s", fp, bs[0].p.Stderr())
			}
			next := finishAfterFailover(t, bs, runner, gate, r.ID)
			next.p.waitLine(0, say)
			if n := countLines(bs, say); n != 1 {
				t.Fatalf("the message in flight was posted %d times, want once", n)
			}
		})
	}
}

// TestRunnerEndInFlightAtFailover: the runner's agent answers and the
// leader dies with the turn's end (done) arrived and not recorded
// (turn_ending): the runner still keeps the end (it is acknowledged only
// once recorded), the new leader re-attaches to the ended turn, gets the
// end again and records it; the agent ran once.
func TestRunnerEndInFlightAtFailover(t *testing.T) {
	bs, runner, gate := runnerHA(t, []string{failpoint.EnvVar + "=" + failpoint.TurnEnding}, "working")
	r := bs[0].create("@coder go")
	bs[0].waitRequest(r.ID, "with its session", 30*time.Second, func(r requests.Request) bool { return r.Session == "s-9" })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bs[0].p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the leader never reached %s", failpoint.TurnEnding)
	}
	if !strings.Contains(bs[0].p.Stderr(), "failpoint "+failpoint.TurnEnding+"@1") {
		t.Fatalf("the leader ended, not at %s:\n%s", failpoint.TurnEnding, bs[0].p.Stderr())
	}
	next := waitLeader(t, bs, 30*time.Second)
	checkAdopted(t, bs, runner, next, r.ID)
	if n := strings.Count(runner.Stderr(), "runner: turn re-attached"); n != 1 {
		t.Fatalf("the runner re-attached the turn %d times, want once (the new leader):\n%s", n, runner.Stderr())
	}
}

// TestRunnerFollowsTheLeader: three bridges on one etcd; the runner knows
// one URL, the third bridge's, which never leads. That follower sends it to
// the leader (the election's advertised URL), where the turn runs. The
// leader is SIGKILLed: the runner, back at its one URL, is sent to the new
// leader, which adopts the turn; the answer lands once.
func TestRunnerFollowsTheLeader(t *testing.T) {
	bs := runnerBridges(t, [][]string{nil, nil, nil})
	runner, gate := startRunner(t, bs[0], "started on the runner", bs[2].base)
	if !strings.Contains(runner.Stderr(), "trying the leader it named") {
		t.Errorf("the runner did not follow the follower's hint:\n%s", runner.Stderr())
	}
	r := bs[0].create("@coder go")
	bs[0].waitRequest(r.ID, "with its session", 30*time.Second, func(r requests.Request) bool { return r.Session == "s-9" })
	if err := bs[0].p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-bs[0].p.done
	next := finishAfterFailover(t, bs, runner, gate, r.ID)
	if next != bs[1] {
		t.Fatalf("bridge %s leads after the failover, want the second (the third's URL is the runner's)", next.base)
	}
}
