package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// stopBridge sends sig to b's process.
func stopBridge(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitExit waits (at most within) for p to exit and returns its status.
func waitExit(t *testing.T, p *proc, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the bridge still runs %v after it was told to stop", within)
		return 0
	}
}

// waitStderr waits until p's stderr contains s.
func waitStderr(t *testing.T, p *proc, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Stderr(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr never said %q", s)
		}
		select {
		case <-p.done:
			if !strings.Contains(p.Stderr(), s) {
				t.Fatalf("the bridge exited before its stderr said %q", s)
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// startSingle starts a single-node bridge in dir with the test config plus
// extra, and waits for its API.
func startSingle(t *testing.T, dir, extra string, env ...string) *haBridge {
	t.Helper()
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, testConfig(dir)+extra)
	b := &haBridge{t: t, p: startBridge(t, dir, env, "run", "--config", cfg), data: filepath.Join(dir, "data")}
	b.base, b.token = b.p.api(b.data)
	return b
}

// TestGracefulStopResumes: SIGTERM while the demo agent is in a long tool.
// First with a grace period shorter than the tool: the bridge exits 0 when
// the grace period ends, interrupting the turn. Then, resumed, with a long
// grace period: meanwhile new work is refused with 503; the bridge waits for
// the tool to end (the safe point), interrupts the turn there and exits 0 at
// once. The third start resumes the request again and it finishes: one ID,
// one session, each interruption and resumption in the audit log.
func TestGracefulStopResumes(t *testing.T) {
	dir := t.TempDir()
	agentLog := filepath.Join(dir, "agents.log")
	prep, build, test := filepath.Join(dir, "prep.done"), filepath.Join(dir, "build.done"), filepath.Join(dir, "test.done")

	b := startSingle(t, dir, "shutdown: {grace: 1s}\n", "DEMO_AGENT_LOG="+agentLog)
	r := b.create(fmt.Sprintf("say started; tool prep %s; tool build %s; tool test %s; echo finished", prep, build, test))
	running := b.waitRequest(r.ID, "in its prep tool", 20*time.Second, func(r requests.Request) bool {
		return r.Activity == "prep" && r.Session != ""
	})
	sent := time.Now()
	stopBridge(t, b.p, syscall.SIGTERM)
	if code := waitExit(t, b.p, 15*time.Second); code != 0 {
		t.Fatalf("stopped with grace 1s: exit %d, want 0:\n%s", code, b.p.Stderr())
	}
	took := time.Since(sent)
	t.Logf("stop with the tool outlasting a 1s grace period: exited after %v", took.Round(time.Millisecond))
	if took < time.Second || took > 5*time.Second {
		t.Errorf("stop took %v; want the 1s grace period (plus the agent's exit)", took)
	}
	if !strings.Contains(b.p.Stderr(), "turn interrupted by shutdown") {
		t.Errorf("the bridge did not log the interrupted turn:\n%s", b.p.Stderr())
	}

	// Resumed, the turn goes past prep (the interrupted turn's activity
	// stays stored until then) into build.
	if err := os.WriteFile(prep, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b = startSingle(t, dir, "shutdown: {grace: 30s}\n", "DEMO_AGENT_LOG="+agentLog)
	b.waitRequest(r.ID, "resumed, in its build tool", 20*time.Second, func(r requests.Request) bool { return r.Activity == "build" })
	// The room is told, in the request's thread (the console's here).
	b.p.waitLine(0, regexp.QuoteMeta(r.ID.String()+" | resumed after a restart"))
	stopBridge(t, b.p, syscall.SIGTERM)
	waitStderr(t, b.p, "stopping gracefully")
	var refused map[string]string
	code := call(t, http.MethodPost, b.base+"/v1/requests", b.token, map[string]string{"room": "main", "text": "echo late"}, &refused)
	if code != http.StatusServiceUnavailable || !strings.Contains(refused["error"], "shutting down") {
		t.Errorf("a new request while stopping: HTTP %d %v; want 503 saying it is shutting down", code, refused)
	}
	if cur, code := b.get(r.ID); code != http.StatusOK || cur.State != requests.Running {
		t.Errorf("reading while stopping: HTTP %d, %s", code, cur.State)
	}
	touched := time.Now()
	if err := os.WriteFile(build, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, b.p, 15*time.Second); code != 0 {
		t.Fatalf("stopped with grace 30s: exit %d, want 0:\n%s", code, b.p.Stderr())
	}
	t.Logf("stop at the safe point: exited %v after the tool could end", time.Since(touched).Round(time.Millisecond))
	if took := time.Since(touched); took > 10*time.Second {
		t.Errorf("exited %v after the tool ended; want soon after the safe point, not the grace period", took)
	}
	log, _ := os.ReadFile(agentLog)
	if n := strings.Count(string(log), "tool end "+r.ID.String()+" build"); n != 1 {
		t.Errorf("the build tool ended %d times, want once (the stop waits for the safe point):\n%s", n, log)
	}

	if err := os.WriteFile(test, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b = startSingle(t, dir, "shutdown: {grace: 30s}\n", "DEMO_AGENT_LOG="+agentLog)
	done := b.waitRequest(r.ID, "done", 30*time.Second, func(r requests.Request) bool { return r.State.Terminal() })
	if done.State != requests.Done || done.Result != "finished" || done.Session != running.Session {
		t.Fatalf("after two stops: %s %q session %q; want done, finished, session %q", done.State, done.Result, done.Session, running.Session)
	}
	var list struct{ Requests []requests.Request }
	call(t, http.MethodGet, b.base+"/v1/requests", b.token, nil, &list)
	if len(list.Requests) != 1 {
		t.Errorf("%d requests, want only %s (no copy)", len(list.Requests), r.ID)
	}
	var interrupted, resumed, dones int
	for _, rec := range b.audit(r.ID) {
		switch {
		case rec.Action == "interrupted":
			interrupted++
		case rec.Action == "resume":
			resumed++
		case rec.To == "done":
			dones++
		}
	}
	if interrupted != 2 || resumed != 2 || dones != 1 {
		t.Errorf("audit: %d interrupted, %d resume, %d done; want 2, 2, 1", interrupted, resumed, dones)
	}
	stopBridge(t, b.p, syscall.SIGTERM)
	if code := waitExit(t, b.p, 15*time.Second); code != 0 {
		t.Errorf("idle bridge: exit %d", code)
	}
}

// TestGracefulStopFlushesOutbox: effects still in the outbox at SIGTERM (the
// fake Slack answered the thread's first post with 429, Retry-After 2s) are
// delivered before the bridge exits.
func TestGracefulStopFlushesOutbox(t *testing.T) {
	fake := slacktest.NewServer()
	defer fake.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, fmt.Sprintf(`owner: acme
data_dir: %s
http: {addr: "127.0.0.1:0"}
slack: {mode: events, bot_token: %s, signing_secret: flush-secret, api_url: %q}
rooms:
  - {name: main, slack_channel: C0FLUSH, agents: [coder]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
shutdown: {grace: 20s}
`, filepath.Join(dir, "data"), slacktest.DefaultBotToken, fake.APIURL(), bridgeBin))
	b := &haBridge{t: t, p: startBridge(t, dir, nil, "run", "--config", cfg), data: filepath.Join(dir, "data")}
	b.base, b.token = b.p.api(b.data)

	fake.FailNext("chat.postMessage", http.StatusTooManyRequests, 4*time.Second)
	r := b.create("say on its way; echo flushed")
	b.waitRequest(r.ID, "done", 20*time.Second, func(r requests.Request) bool { return r.State.Terminal() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fake.WaitFor(ctx, func(s *slacktest.Server) bool { return s.RateLimited("chat.postMessage") > 0 }); err != nil {
		t.Fatalf("waiting for the first post's 429: %v", err)
	}
	if fake.RateLimited("chat.postMessage") != 1 || len(fake.Messages()) != 0 {
		t.Fatalf("before the stop: %d 429s, messages %+v; want the thread held back by one 429", fake.RateLimited("chat.postMessage"), fake.Messages())
	}
	stopBridge(t, b.p, syscall.SIGTERM)
	if code := waitExit(t, b.p, 25*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, b.p.Stderr())
	}
	var texts []string
	for _, m := range fake.Messages() {
		texts = append(texts, m.Text)
	}
	if len(texts) != 3 || !strings.HasSuffix(texts[0], "— done") || texts[1] != "on its way" || texts[2] != "flushed" {
		t.Errorf("delivered before exit: %q; want the thread parent showing done, the message and the answer", texts)
	}
	if !strings.Contains(b.p.Stderr(), "outbox flushed") {
		t.Errorf("the bridge did not log the flush:\n%s", b.p.Stderr())
	}
	db, err := bolt.Open(filepath.Join(b.data, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var left []store.Effect
	if err := db.View(context.Background(), func(tx store.Tx) error {
		var err error
		left, err = store.PendingEffects(tx, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d effect(s) left in the outbox after a graceful stop", len(left))
	}
}

// TestSecondSignalExitsAtOnce: a second SIGINT during a graceful stop that
// waits on a long tool exits at once, with 130.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	b := startSingle(t, dir, "shutdown: {grace: 30s}\n")
	r := b.create("tool build " + filepath.Join(dir, "never"))
	b.waitRequest(r.ID, "in its tool", 20*time.Second, func(r requests.Request) bool { return r.Activity == "build" })
	stopBridge(t, b.p, syscall.SIGINT)
	waitStderr(t, b.p, "stopping gracefully")
	sent := time.Now()
	stopBridge(t, b.p, syscall.SIGINT)
	code := waitExit(t, b.p, 5*time.Second)
	t.Logf("second signal: exited after %v", time.Since(sent).Round(time.Millisecond))
	if code != 130 || !strings.Contains(b.p.Stderr(), "a second signal") {
		t.Errorf("exit %d after a second SIGINT, want 130 and a log line saying why:\n%s", code, b.p.Stderr())
	}
	if took := time.Since(sent); took > 2*time.Second {
		t.Errorf("a second signal took %v to end the bridge; want at once", took)
	}
}

// TestHAGracefulHandover: two bridges on one etcd; the leader gets SIGTERM:
// it resigns, and the follower leads well within the lease TTL. Several
// rounds (the stopped bridge restarts as the follower); the median is
// reported.
func TestHAGracefulHandover(t *testing.T) {
	const rounds = 5
	srv := etcdtest.Start(t)
	bs := startHA(t, srv, 2, "")
	var took []time.Duration
	for range rounds {
		leader := waitLeader(t, bs, 20*time.Second)
		other := bs[0]
		if other == leader {
			other = bs[1]
		}
		sent := time.Now()
		stopBridge(t, leader.p, syscall.SIGTERM)
		for !other.ready() {
			if time.Since(sent) > haLeaseTTL+5*time.Second {
				t.Fatalf("no new leader %v after the leader's SIGTERM", time.Since(sent))
			}
			time.Sleep(2 * time.Millisecond) // a polling tick, not a wait for a state
		}
		took = append(took, time.Since(sent))
		if code := waitExit(t, leader.p, 10*time.Second); code != 0 {
			t.Fatalf("the stopped leader exited %d:\n%s", code, leader.p.Stderr())
		}
		dir := filepath.Dir(leader.data)
		restarted := &haBridge{t: t, p: startBridge(t, dir, nil, "run", "--config", filepath.Join(dir, "bridge.yaml")), data: leader.data}
		restarted.base, restarted.token = restarted.p.api(restarted.data)
		bs = []*haBridge{other, restarted}
	}
	slices.Sort(took)
	median := took[len(took)/2]
	t.Logf("takeover after the leader's SIGTERM over %d rounds: median %v, min %v, max %v (lease TTL %v)",
		rounds, median.Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), haLeaseTTL)
	if median > haLeaseTTL/4 || took[len(took)-1] > haLeaseTTL/2 {
		t.Errorf("takeover times %v; want well under the lease TTL %v", took, haLeaseTTL)
	}
}
