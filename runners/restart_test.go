package runners_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tcpcut"
	"github.com/roombridge/roombridge/runners"
)

// logged is a text logger into a buffer the test reads, shown when the
// test fails.
func logged(t *testing.T, what string) (*slog.Logger, *syncbuf.Buffer) {
	t.Helper()
	buf := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", what, buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

// TestSecondRunnerRefused: a second runner process claiming the same
// runner while the first answers is refused, clearly, again and again
// (it logs the refusal once and keeps retrying); the first stays
// connected; once the first stops, the second gets in and runs the turns.
func TestSecondRunnerRefused(t *testing.T) {
	blog, blogs := logged(t, "the bridge")
	b := coretest.Start(t, coretest.Options{Config: bridgeConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console}, HoldOutbox: true, Log: blog})
	tok := addRunner(t, b.DB, "laptop")
	flog, flogs := logged(t, "the first runner")
	_, stopFirst := runRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok, Log: flog})
	waitConnected(t, b, "laptop")
	slog2, slogs := logged(t, "the second runner")
	second, _ := runRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok, Log: slog2})
	waitFor(t, "the second runner refused three times", func() bool {
		return strings.Count(blogs.String(), "already connected from another machine") >= 3
	})
	select {
	case err := <-second:
		t.Fatalf("the refused runner stopped (%v), want it retrying", err)
	default:
	}
	if n := strings.Count(slogs.String(), "already connected from another machine"); n != 1 {
		t.Fatalf("the refused runner logged its refusal %d times, want once:\n%s", n, slogs.String())
	}
	if n := strings.Count(flogs.String(), `msg="runner connected"`); n != 1 {
		t.Fatalf("the first runner connected %d times, want once (unaffected)", n)
	}
	waitConnected(t, b, "laptop")
	stopFirst()
	waitFor(t, "the second runner in", func() bool { return strings.Contains(slogs.String(), `msg="runner connected"`) })
	askCoder(t, b)
}

// TestRestartedRunnerReplacesStaleConnection: a runner's machine that
// rebooted leaves a connection open and silent (frozen here); the new
// process's hello is not refused: the bridge probes the old connection,
// which does not answer within the probe's bound (on the bridge's fake
// clock), drops it and accepts the new one, far within the grace; the
// turns then run on the new process.
func TestRestartedRunnerReplacesStaleConnection(t *testing.T) {
	blog, blogs := logged(t, "the bridge")
	clk := clock.NewFake(time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC))
	b := coretest.Start(t, coretest.Options{Config: bridgeConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console},
		HoldOutbox: true, Clock: clk, RunnerWatch: 2 * time.Millisecond, Log: blog})
	tok, err := runners.Add(context.Background(), b.DB, clk.Now(), "laptop")
	if err != nil {
		t.Fatal(err)
	}
	p := tcpcut.New(t, strings.TrimPrefix(b.URL, "http://"))
	_, stopOld := runRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL()}, Token: tok})
	waitConnected(t, b, "laptop")
	p.Freeze() // the machine lost power: its connection stays open, silent
	stopOld()
	rlog, rlogs := logged(t, "the new runner")
	runRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok, Log: rlog})
	waitFor(t, "the bridge answering the new process's hello", func() bool {
		return strings.Contains(blogs.String(), "probing the connection") || strings.Contains(blogs.String(), "runner refused")
	})
	start := clk.Now()
	for !strings.Contains(rlogs.String(), `msg="runner connected"`) {
		if strings.Contains(rlogs.String(), "already connected") {
			t.Fatal("the new runner process was refused: already connected")
		}
		if elapsed := clk.Now().Sub(start); elapsed > runners.DefaultProbe+time.Second {
			t.Fatalf("the new runner process is not in %v after the probe began (probe %v)", elapsed, runners.DefaultProbe)
		}
		clk.Advance(50 * time.Millisecond)
		time.Sleep(2 * time.Millisecond) // the fake clock's step
	}
	if elapsed := clk.Now().Sub(start); elapsed < runners.DefaultProbe {
		t.Fatalf("the old connection dropped after %v, before the probe's bound %v", elapsed, runners.DefaultProbe)
	}
	askCoder(t, b)
}

// TestStatusesListEveryRunner: a status list always lists every
// registered runner, whatever their connections do: polled all along
// while laptop connects and stops again and again (and spare, registered,
// never connects), no list lacks one or fails.
func TestStatusesListEveryRunner(t *testing.T) {
	b := startBridge(t)
	ctx := context.Background()
	tok := addRunner(t, b.DB, "laptop")
	if _, err := runners.Add(ctx, b.DB, time.Now(), "spare"); err != nil {
		t.Fatal(err)
	}
	done, bad := make(chan struct{}), make(chan string, 1)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		sample := time.NewTicker(500 * time.Microsecond) // a sampling cadence, not a wait
		defer sample.Stop()
		for {
			select {
			case <-done:
				return
			case <-sample.C:
			}
			st, err := b.Runners().Statuses(ctx)
			if err != nil || len(st) != 2 || st[0].Name != "laptop" || st[1].Name != "spare" || st[1].Connected {
				bad <- fmt.Sprintf("statuses %+v, error %v", st, err)
				return
			}
		}
	}()
	for range 6 {
		_, stop := runRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok})
		waitConnected(t, b, "laptop")
		stop()
		waitFor(t, "laptop listed as disconnected", func() bool {
			st, err := b.Runners().Statuses(ctx)
			return err == nil && len(st) == 2 && !st[0].Connected
		})
	}
	close(done)
	<-polled
	select {
	case why := <-bad:
		t.Fatalf("a status list lacked a registered runner: %s", why)
	default:
	}
}

// TestRunnerGivesUpSilentBridge: a bridge URL that accepts the connection
// and then says nothing (a frozen proxy: the bridge's machine gone) is
// given up after RunnerOptions.Welcome for the next URL, where the runner
// gets in and runs the turns.
func TestRunnerGivesUpSilentBridge(t *testing.T) {
	b := startBridge(t)
	tok := addRunner(t, b.DB, "laptop")
	p := tcpcut.New(t, strings.TrimPrefix(b.URL, "http://"))
	p.Freeze()
	rlog, rlogs := logged(t, "the runner")
	runRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{p.URL(), b.URL}, Token: tok, Log: rlog, Welcome: 300 * time.Millisecond})
	waitConnected(t, b, "laptop")
	if !strings.Contains(rlogs.String(), "no welcome from the bridge within 300ms") {
		t.Fatalf("the runner's logs do not say why it left the silent URL:\n%s", rlogs.String())
	}
	askCoder(t, b)
}
