package runners_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/runners"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// awayBridge is a bridge on a fake clock (18:00) whose watchdog looks
// often, so the grace (30 s) passes when the test advances the clock.
func awayBridge(t *testing.T) (*coretest.Bridge, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC))
	b := coretest.Start(t, coretest.Options{Config: bridgeConfig, Dir: t.TempDir(), Surfaces: []string{chat.Console},
		HoldOutbox: true, Clock: clk, RunnerWatch: 2 * time.Millisecond})
	return b, clk
}

// gatedRunner starts runner laptop whose agent says "started", waits for
// the file gate, then answers "all good"; stop ends the runner (its
// processes with it).
func gatedRunner(t *testing.T, b *coretest.Bridge, token, gate string) (stop func()) {
	t.Helper()
	script := `read turn; echo '{"type":"session","id":"s-1"}'; echo '{"type":"message","text":"started"}'
while [ ! -e ` + gate + ` ]; do sleep 0.01; done; echo '{"type":"final","text":"all good"}'`
	_, _, stop = goRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: token,
		Agents: map[string]agents.Runtime{"coder": &process.Runtime{Kind: process.Exec, Command: []string{"sh", "-c", script}}},
		Retry:  20 * time.Millisecond})
	return stop
}

func ask(t *testing.T, b *coretest.Bridge) requests.ID {
	t.Helper()
	r, err := b.Requests().Create(context.Background(), requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: "console:you", Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// askEnded asks coder as ask does and waits until the request has ended.
func askEnded(t *testing.T, b *coretest.Bridge) *requests.Request {
	t.Helper()
	id := ask(t, b)
	var got *requests.Request
	waitFor(t, "the request to end", func() bool {
		var err error
		got, err = b.Requests().Get(context.Background(), id)
		return err == nil && got.State.Terminal()
	})
	return got
}

// until waits (advancing clk by step each round, when set) until cond
// holds of the requests ids.
func until(t *testing.T, b *coretest.Bridge, clk *clock.Fake, step time.Duration, what string, cond func(rs []*requests.Request) bool, ids ...requests.ID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var rs []*requests.Request
	for time.Now().Before(deadline) {
		rs = rs[:0]
		for _, id := range ids {
			r, err := b.Requests().Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		if cond(rs) {
			return
		}
		if step > 0 {
			clk.Advance(step)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, r := range rs {
		t.Logf("%s %s activity %q", r.ID, r.State, r.Activity)
	}
	t.Fatalf("never %s", what)
}

// outbox lists the effects queued for the thread of request id.
func outbox(t *testing.T, b *coretest.Bridge, id requests.ID) []threads.Effect {
	t.Helper()
	var out []threads.Effect
	err := b.DB.View(context.Background(), func(tx store.Tx) error {
		effs, err := store.PendingEffects(tx, 0)
		for _, se := range effs {
			var ef threads.Effect
			if err := json.Unmarshal(se.Payload, &ef); err != nil {
				return err
			}
			if ef.Request == id.String() {
				out = append(out, ef)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// told counts the replies matching re in the threads of ids.
func told(t *testing.T, b *coretest.Bridge, re string, ids ...requests.ID) int {
	t.Helper()
	rx, n := regexp.MustCompile(re), 0
	for _, id := range ids {
		for _, ef := range outbox(t, b, id) {
			if ef.Op == threads.OpReply && rx.MatchString(ef.Message.Text) {
				n++
			}
		}
	}
	return n
}

func noted(rs []*requests.Request) bool {
	for _, r := range rs {
		if r.State != requests.Approved || !strings.HasPrefix(r.Activity, "coder's runner laptop is away since 18:0") {
			return false
		}
	}
	return true
}

func queuedPlain(rs []*requests.Request) bool {
	for _, r := range rs {
		if r.State != requests.Approved || r.Activity != "" || threads.StatusLine(r, "") != "approved · queued" {
			return false
		}
	}
	return true
}

// TestQueuedSayWhyRunnerNeverConnected: a runner not connected since the
// bridge began leading is away once the grace has passed (fake clock):
// the running turn says so, each queued request's status says why it
// waits (one made while away too), the room is told once; when the
// runner connects the queued statuses are plain again and every request
// is answered.
func TestQueuedSayWhyRunnerNeverConnected(t *testing.T) {
	b, clk := awayBridge(t)
	tok, err := runners.Add(context.Background(), b.DB, clk.Now(), "laptop")
	if err != nil {
		t.Fatal(err)
	}
	first, second := ask(t, b), ask(t, b)
	until(t, b, clk, 0, "the first running", func(rs []*requests.Request) bool { return rs[0].State == requests.Running }, first)
	until(t, b, clk, 31*time.Second, "the queued request noted", noted, second)
	third := ask(t, b)
	until(t, b, clk, 0, "the request made while away noted", noted, third)
	until(t, b, clk, 0, "the running turn saying why", func(rs []*requests.Request) bool {
		return strings.HasPrefix(rs[0].Activity, "runner laptop has not connected since 18:0")
	}, first)
	var status string
	for _, ef := range outbox(t, b, second) {
		if ef.Op == threads.OpUpdate && ef.Message.Card != nil {
			status = ef.Message.Card.Status
		}
	}
	if !strings.HasPrefix(status, "approved · queued · coder's runner laptop is away since 18:0") {
		t.Fatalf("the queued request's thread status is %q, want it to say the runner is away", status)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	gatedRunner(t, b, tok, gate)
	until(t, b, clk, 0, "the queued statuses plain again", queuedPlain, second, third)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	until(t, b, clk, 0, "every request answered", func(rs []*requests.Request) bool {
		for _, r := range rs {
			if r.State != requests.Done || r.Result != "all good" {
				return false
			}
		}
		return true
	}, first, second, third)
	if n := told(t, b, `runner laptop has not connected since 18:0\d \(agents coder\)`, first, second, third); n != 1 {
		t.Fatalf("the room was told %d times the runner is away, want once", n)
	}
	if n := told(t, b, `resumed`, first); n != 0 {
		t.Fatalf("a turn that never ran was said to resume (%d)", n)
	}
}

// connectedAway starts an away-test bridge and a gated runner "laptop"
// connected to it; gate is the file that lets its agent answer, stop ends
// the runner.
func connectedAway(t *testing.T) (*coretest.Bridge, *clock.Fake, string, string, func()) {
	t.Helper()
	b, clk := awayBridge(t)
	tok, err := runners.Add(context.Background(), b.DB, clk.Now(), "laptop")
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	stop := gatedRunner(t, b, tok, gate)
	waitConnected(t, b, "laptop")
	return b, clk, tok, gate, stop
}

// TestQueuedSayWhyRunnerWentAway: a connected runner that goes away
// (its connection ends; the grace passes on the fake clock) interrupts
// its turn and notes its queued requests, telling the room once; a new
// runner process resumes the turn with its session ("resumed") and the
// notes come off.
func TestQueuedSayWhyRunnerWentAway(t *testing.T) {
	b, clk, tok, gate, stop := connectedAway(t)
	first, second := ask(t, b), ask(t, b)
	until(t, b, clk, 0, "the first turn started", func(rs []*requests.Request) bool { return rs[0].Session == "s-1" }, first)
	stop()
	until(t, b, clk, 31*time.Second, "the queued request noted", noted, second)
	until(t, b, clk, 0, "the running turn interrupted", func(rs []*requests.Request) bool {
		return strings.HasPrefix(rs[0].Activity, "interrupted: runner laptop went away at 18:0")
	}, first)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gatedRunner(t, b, tok, gate)
	until(t, b, clk, 0, "both answered", func(rs []*requests.Request) bool {
		return rs[0].State == requests.Done && rs[1].State == requests.Done && rs[0].Result == "all good"
	}, first, second)
	if n := told(t, b, `runner laptop went away at 18:0\d \(agents coder\): its turns resume`, first, second); n != 1 {
		t.Fatalf("the room was told %d times the runner went away, want once", n)
	}
	if n := told(t, b, `^resumed 18:\d\d on runner laptop`, first); n != 1 {
		t.Fatalf("the thread says resumed %d times, want once", n)
	}
}

// TestRestartWithinGraceResumes: a new runner process that connects
// within the grace (the old one's turn died with it) resumes the turn
// with its session: the thread says "resumed" once and nothing says the
// runner went away.
func TestRestartWithinGraceResumes(t *testing.T) {
	b, clk, tok, gate, stop := connectedAway(t)
	first := ask(t, b)
	until(t, b, clk, 0, "the turn started", func(rs []*requests.Request) bool { return rs[0].Session == "s-1" }, first)
	stop()
	deadline := time.Now().Add(10 * time.Second)
	for st, _ := b.Runners().Statuses(context.Background()); len(st) != 1 || st[0].Connected; st, _ = b.Runners().Statuses(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatal("the stopped runner never disconnected")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gatedRunner(t, b, tok, gate)
	until(t, b, clk, 0, "answered", func(rs []*requests.Request) bool {
		return rs[0].State == requests.Done && rs[0].Result == "all good" && rs[0].Session == "s-1"
	}, first)
	if n := told(t, b, `^resumed 18:\d\d on runner laptop`, first); n != 1 {
		t.Fatalf("the thread says resumed %d times, want once", n)
	}
	if n := told(t, b, `went away`, first); n != 0 {
		t.Fatalf("the thread says the runner went away (%d) within the grace", n)
	}
}
