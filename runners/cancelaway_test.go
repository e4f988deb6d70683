package runners_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tcpcut"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
)

// TestCancelWhileRunnerCutOff: a person cancels a running request whose
// runner is cut off (its turn waits on the bridge for the runner). The
// cancel ends the turn at once, as Turn.Cancel does for a local turn at
// its safe point: the request is cancelled, not left running until the
// runner comes back (before: the cancel was only kept to tell the runner,
// and the request stayed running). When the runner comes back, its live
// turn is stopped (Hub.stopEnded).
func TestCancelWhileRunnerCutOff(t *testing.T) {
	cancelWhileCutOff(t)
}

// TestStoppedEndedTurnForgotten: the turn the hub stopped because its
// request had ended (Hub.stopEnded: no turn of the bridge's holds it) is
// forgotten by the runner once stopped: nothing of it is kept (before: its
// end stayed buffered, and the turn listed live in every hello, for the
// runner's life, as nobody would ever record that end).
func TestStoppedEndedTurnForgotten(t *testing.T) {
	r := cancelWhileCutOff(t)
	waitFor(t, "the runner to forget the stopped turn", func() bool { return r.Buffered() == 0 })
}

// cancelWhileCutOff runs a turn on runner laptop, cancels its request
// while the runner is cut off, checks that the request is cancelled, lets
// the runner back and returns it once its turn stopped.
func cancelWhileCutOff(t *testing.T) *runners.Runner {
	t.Helper()
	b := startBridge(t)
	ctx := context.Background()
	tok := addRunner(t, b.DB, "laptop")
	p := tcpcut.New(t, strings.TrimPrefix(b.URL, "http://"))
	rt := stopped{gone: make(chan struct{})}
	var logs syncbuf.Buffer
	r, _, _ := goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL()}, Token: tok,
		Agents: map[string]agents.Runtime{"coder": rt}, Retry: 10 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	waitConnected(t, b, "laptop")
	id := ask(t, b)
	waitFor(t, "the turn running", func() bool {
		got, err := b.Requests().Get(ctx, id)
		return err == nil && got.State == requests.Running && strings.Contains(logs.String(), "turn starting")
	})
	p.Cut()
	waitFor(t, "the bridge seeing the cut", func() bool { return !connected(t, b) })
	if _, err := b.Router().Cancel(ctx, id, "console:you", "console"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request cancelled with its runner cut off", func() bool {
		got, err := b.Requests().Get(ctx, id)
		return err == nil && got.State == requests.Cancelled
	})
	p.Heal()
	select {
	case <-rt.gone:
	case <-time.After(20 * time.Second):
		t.Fatalf("the cancelled request's turn still runs on the runner after it came back; logs:\n%s", logs.String())
	}
	return r
}
