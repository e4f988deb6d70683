package runners_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tcpcut"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
	"github.com/roombridge/roombridge/threads"
)

// chatty is an agent that reports first messages m1…, says so on
// phase1, waits for gateA, reports more messages, says so on phase2,
// waits for gateB and answers.
type chatty struct {
	first, more    int
	phase1, phase2 chan struct{}
	gateA, gateB   chan struct{}
}

func (a *chatty) Run(ctx context.Context, _ agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	n := 0
	say := func(k int, done chan struct{}, gate chan struct{}) error {
		for range k {
			n++
			if err := sink.Message(ctx, fmt.Sprintf("m%d", n)); err != nil {
				return err
			}
		}
		close(done)
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := say(a.first, a.phase1, a.gateA); err != nil {
		return agents.Outcome{}, err
	}
	if err := say(a.more, a.phase2, a.gateB); err != nil {
		return agents.Outcome{}, err
	}
	return agents.Outcome{Final: "all good"}, nil
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestRunnerBufferBounded: a turn streaming many events keeps the
// runner's buffer at most AckEvery frames once the bridge has applied
// them (the bridge acknowledges as it goes); a network cut mid-turn,
// with frames reported while cut, is re-attached on reconnect and every
// event is applied exactly once, in order.
func TestRunnerBufferBounded(t *testing.T) {
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of the bridge and the runner:\n%s", logs.String())
		}
	})
	b := coretest.Start(t, coretest.Options{Config: bridgeConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console}, HoldOutbox: true, Log: log})
	tok := addRunner(t, b.DB, "laptop")
	p := tcpcut.New(t, strings.TrimPrefix(b.URL, "http://"))
	a := &chatty{first: 120, more: 40, phase1: make(chan struct{}), phase2: make(chan struct{}),
		gateA: make(chan struct{}), gateB: make(chan struct{})}
	r, _, _ := goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL()}, Token: tok,
		Agents: map[string]agents.Runtime{"coder": a}, Retry: 10 * time.Millisecond, Log: log})
	waitConnected(t, b, "laptop")
	id := ask(t, b)
	<-a.phase1
	waitFor(t, "the runner's buffer down to AckEvery", func() bool { return r.Buffered() <= runners.AckEvery })

	p.Cut()
	waitFor(t, "the bridge seeing the cut", func() bool { return !connected(t, b) })
	close(a.gateA)
	<-a.phase2
	p.Heal()
	waitConnected(t, b, "laptop")
	close(a.gateB)
	waitFor(t, "the answer", func() bool {
		got, err := b.Requests().Get(context.Background(), id)
		return err == nil && got.State == requests.Done && got.Result == "all good"
	})
	var said []string
	for _, ef := range outbox(t, b, id) {
		if ef.Op == threads.OpReply && ef.Message.Kind == "reply" {
			said = append(said, ef.Message.Text)
		}
	}
	if len(said) != a.first+a.more {
		t.Fatalf("%d messages applied, want %d, each once: %q", len(said), a.first+a.more, said)
	}
	for i, s := range said {
		if s != fmt.Sprintf("m%d", i+1) {
			t.Fatalf("message %d is %q, want m%d (each once, in order): %q", i+1, s, i+1, said)
		}
	}
	waitFor(t, "the runner forgetting the ended turn", func() bool { return r.Buffered() == 0 })
}

func connected(t *testing.T, b *coretest.Bridge) bool {
	t.Helper()
	st, err := b.Runners().Statuses(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(st) == 1 && st[0].Connected
}
