package runners_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/runners"
	"github.com/roombridge/roombridge/store"
)

const bridgeConfig = `
owner: acme
owners: [console:you]
data_dir: %DIR%
rooms:
  - {name: main, console: true, agents: [coder], approvers: [console:you]}
agents:
  coder: {kind: runner, runner: laptop}
runners: {grace: 30s, heartbeat: 1s}
`

// agentScript is an exec-protocol agent: one message, then a final answer.
const agentScript = `read turn; echo '{"type":"session","id":"s-1"}'; echo '{"type":"message","text":"working on the runner"}'; echo '{"type":"final","text":"all good"}'`

func startBridge(t *testing.T) *coretest.Bridge {
	t.Helper()
	return coretest.Start(t, coretest.Options{Config: bridgeConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console}, HoldOutbox: true})
}

// runner starts runner name with token against b; the returned channel
// gives Run's error.
func runner(t *testing.T, b *coretest.Bridge, name, token string) <-chan error {
	t.Helper()
	return startRunner(t, runners.RunnerOptions{Name: name, URLs: []string{b.URL}, Token: token})
}

// startRunner runs a runner of o whose agent coder runs agentScript; the
// returned channel gives Run's error.
func startRunner(t *testing.T, o runners.RunnerOptions) <-chan error {
	t.Helper()
	errs, _ := runRunner(t, o)
	return errs
}

// runRunner is startRunner that also gives a stop (Run ends, its
// processes with it).
func runRunner(t *testing.T, o runners.RunnerOptions) (<-chan error, func()) {
	t.Helper()
	o.Agents = map[string]agents.Runtime{"coder": &process.Runtime{Kind: process.Exec, Command: []string{"sh", "-c", agentScript}}}
	o.Retry = 20 * time.Millisecond
	_, errs, stop := goRunner(t, o)
	return errs, stop
}

// goRunner makes the runner of o and runs it in its own goroutine until
// stop (called at the test's end at the latest); errs gives Run's error.
func goRunner(t *testing.T, o runners.RunnerOptions) (r *runners.Runner, errs <-chan error, stop func()) {
	t.Helper()
	r, err := runners.NewRunner(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, done := make(chan error, 1), make(chan struct{})
	go func() { ch <- r.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return r, ch, stop
}

func waitConnected(t *testing.T, b *coretest.Bridge, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, err := b.Runners().Statuses(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Name == name && s.Connected {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("runner %s never connected", name)
}

// TestTurnRunsOnRunner: a request for a runner-hosted agent runs on the
// runner (a process it starts) and its answer lands in the bridge.
func TestTurnRunsOnRunner(t *testing.T) {
	b := startBridge(t)
	tok := addRunner(t, b.DB, "laptop")
	runner(t, b, "laptop", tok)
	waitConnected(t, b, "laptop")
	askCoder(t, b)
}

// askCoder asks coder in main and waits until the runner agent's answer,
// with its session, is the request's result.
func askCoder(t *testing.T, b *coretest.Bridge) {
	t.Helper()
	ctx := context.Background()
	r, err := b.Requests().Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: "console:you", Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.Requests().Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == requests.Done {
			if got.Result != "all good" || got.Session != "s-1" {
				t.Fatalf("result %q session %q, want the runner agent's answer and session", got.Result, got.Session)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s is %s, want done", r.ID, got.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRevokedTokenRefused: revoking closes the runner's connection and
// the runner stops, refused; an unknown token is refused at once.
func TestRevokedTokenRefused(t *testing.T) {
	b := startBridge(t)
	tok := addRunner(t, b.DB, "laptop")
	errs := runner(t, b, "laptop", tok)
	waitConnected(t, b, "laptop")
	if err := b.Runners().Revoke(context.Background(), "laptop"); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, errs); !errors.Is(err, runners.ErrRefused) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked runner: %v, want refused: token revoked", err)
	}
	if err := waitErr(t, runner(t, b, "laptop", tok)); !errors.Is(err, runners.ErrRefused) {
		t.Fatalf("reconnect with a revoked token: %v, want refused", err)
	}
}

func waitErr(t *testing.T, errs <-chan error) error {
	t.Helper()
	select {
	case err := <-errs:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not stop")
		return nil
	}
}

// TestMetricsAndList: /metrics counts the connected runner and its agent;
// Statuses shows it connected with a last contact.
func TestMetricsAndList(t *testing.T) {
	b := startBridge(t)
	tok := addRunner(t, b.DB, "laptop")
	runner(t, b, "laptop", tok)
	waitConnected(t, b, "laptop")
	st, err := b.Runners().Statuses(context.Background())
	if err != nil || len(st) != 1 || st[0].LastContact.IsZero() || !slices.Equal(st[0].Agents, []string{"coder"}) {
		t.Fatalf("statuses %+v %v, want laptop connected with coder and a last contact", st, err)
	}
	resp, err := http.Get(b.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{"roombridge_runners_connected 1", "roombridge_runner_agents_hosted 1",
		`roombridge_runner_turns_in_flight{runner="laptop"} 0`, "roombridge_runner_reconnects_total 0"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
}

// TestStoreFailureIsNotARefusal: a hub that cannot read the token record
// (here unreadable; etcd unreachable is the common case) answers
// Unavailable, and the runner keeps trying instead of stopping as refused.
func TestStoreFailureIsNotARefusal(t *testing.T) {
	b := startBridge(t)
	tok := addRunner(t, b.DB, "laptop")
	// A record that cannot be read: a failure of the bridge's, not a wrong token.
	err := b.DB.Update(context.Background(), func(tx store.Tx) error { return tx.Put("runners", "laptop", []byte("{not json")) })
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	errs := startRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok,
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	waitFor(t, "the bridge's Unavailable answer logged", func() bool {
		select {
		case err := <-errs:
			t.Fatalf("the runner stopped: %v; want it to retry a store failure of the bridge", err)
		default:
		}
		return strings.Contains(logs.String(), "cannot check the token now")
	})
	select {
	case err := <-errs:
		t.Fatalf("the runner stopped: %v; want it to retry", err)
	default:
	}
}

// TestRefusedTokensAuditedBounded: a runner with a wrong token is refused
// and audited (auth_refused, its name cut to runners.MaxNameAudited), at
// the bounded rate of the other unauthenticated refusals.
func TestRefusedTokensAuditedBounded(t *testing.T) {
	b := startBridge(t)
	if _, err := runners.Add(context.Background(), b.DB, time.Now(), "laptop"); err != nil {
		t.Fatal(err)
	}
	long := "laptop" + strings.Repeat("x", 1000)
	for i := range rooms.RefusalsPerWindow + 3 {
		name := "laptop"
		if i == 0 {
			name = long
		}
		if err := waitErr(t, runner(t, b, name, "rt_forged")); !errors.Is(err, runners.ErrRefused) {
			t.Fatalf("runner with a forged token: %v, want refused", err)
		}
	}
	recs, err := audit.List(context.Background(), b.DB, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var refused []audit.Record
	for _, r := range recs {
		if r.Action == "auth_refused" {
			refused = append(refused, r)
		}
	}
	if len(refused) != rooms.RefusalsPerWindow {
		t.Fatalf("%d auth_refused records after %d refusals, want %d", len(refused), rooms.RefusalsPerWindow+3, rooms.RefusalsPerWindow)
	}
	if a := refused[0].Actor; len(a) > len("runner:")+runners.MaxNameAudited || !strings.HasPrefix(a, "runner:laptop") {
		t.Fatalf("first refusal's actor %q (%d bytes): want the runner's name cut to %d bytes", a, len(a), runners.MaxNameAudited)
	}
}

// addRunner registers a runner named name on db and returns its token.
func addRunner(t *testing.T, db store.Store, name string) string {
	t.Helper()
	tok, err := runners.Add(context.Background(), db, time.Now(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
