package runners_test

import (
	"context"
	"errors"
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

// stopped is a runtime whose turn waits until it is cancelled (at its
// safe point: Turn.Cancel) or stopped, and says so.
type stopped struct{ gone chan struct{} }

func (a stopped) Run(ctx context.Context, t agents.Turn, _ agents.Sink) (agents.Outcome, error) {
	defer close(a.gone)
	select {
	case <-t.Cancel:
		return agents.Outcome{}, errors.New("cancelled")
	case <-ctx.Done():
		return agents.Outcome{}, ctx.Err()
	}
}

// TestEndedRequestStopsItsLiveTurn: a request cancelled while its runner
// is cut off ends without the runner hearing of it; when the runner comes
// back and says its turn is alive, the bridge stops that turn instead of
// leaving it to work on unattended.
func TestEndedRequestStopsItsLiveTurn(t *testing.T) {
	b := startBridge(t)
	ctx := context.Background()
	tok := addRunner(t, b.DB, "laptop")
	p := tcpcut.New(t, strings.TrimPrefix(b.URL, "http://"))
	rt := stopped{gone: make(chan struct{})}
	var logs syncbuf.Buffer
	goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL()}, Token: tok,
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
	if _, err := b.Requests().Apply(ctx, id, requests.Change{Event: requests.Cancel, Actor: "console:you", Surface: "console"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request cancelled", func() bool {
		got, err := b.Requests().Get(ctx, id)
		return err == nil && got.State == requests.Cancelled
	})
	select {
	case <-rt.gone:
		t.Fatal("the turn stopped while the runner was cut off")
	default:
	}
	p.Heal()
	select {
	case <-rt.gone:
	case <-time.After(20 * time.Second):
		t.Fatalf("the cancelled request's turn still runs on the runner after it came back; logs:\n%s", logs.String())
	}
}
