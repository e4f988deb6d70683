package runners

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tcpcut"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// The hub's own bookkeeping, driven through real runners on loopback: a
// hub on a real bbolt file and a fake clock, runners made with NewRunner
// whose agents are the in-process runtimes below, and turns run as the
// scheduler runs them (Runtime.Run with a sink). The tests look inside
// the hub (its connections, a turn's line) only to know when the state
// they set up has been reached.

// hubRig is a hub served on loopback with runner laptop registered.
type hubRig struct {
	hub   *Hub
	db    store.Store
	clk   *clock.Fake
	url   string
	token string
	logs  *syncbuf.Buffer // the hub's
}

// newHubRig serves a hub hosting coder and other on runner laptop, whose
// background tasks' ends go to the delegation service; its watchdog and
// probes look every 2 ms (the probe's bound passes on clk).
func newHubRig(t *testing.T) *hubRig {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	g := &hubRig{db: db, clk: clock.NewFake(time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)), logs: &syncbuf.Buffer{}}
	tasks := delegation.New(delegation.Options{Requests: requests.NewService(db, g.clk, "acme", nil)})
	g.hub = NewHub(HubOptions{Store: db, Clock: g.clk, Log: slog.New(slog.NewTextHandler(g.logs, nil)),
		Hosts: map[string]string{"coder": "laptop", "other": "laptop"}, Watch: 2 * time.Millisecond, Tasks: tasks})
	srv := httptest.NewUnstartedServer(g.hub.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	g.url = srv.URL
	if g.token, err = Add(context.Background(), db, g.clk.Now(), "laptop"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the hub's logs:\n%s", g.logs.String())
		}
	})
	return g
}

// runner runs a process of runner laptop against url with agents until
// the test ends; its logs go to logs (nil: discarded).
func (g *hubRig) runner(t *testing.T, url string, ags map[string]agents.Runtime, logs *syncbuf.Buffer) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	r, err := NewRunner(RunnerOptions{Name: "laptop", URLs: []string{url}, Token: g.token, Agents: ags,
		Retry: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// conn is runner laptop's connection (nil: none).
func (g *hubRig) conn() *conn {
	g.hub.mu.Lock()
	defer g.hub.mu.Unlock()
	if x := g.hub.host["laptop"]; x != nil {
		return x.c
	}
	return nil
}

// hubTurn is a turn run by the hub as the scheduler runs one.
type hubTurn struct {
	ended chan turnEnd
}

// turnEnd is what Run returned.
type turnEnd struct {
	out agents.Outcome
	err error
}

// turn runs request req of agent with sink until it ends or the test
// does.
func (g *hubRig) turn(t *testing.T, req, agent string, sink agents.Sink) *hubTurn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ht := &hubTurn{ended: make(chan turnEnd, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err := g.hub.Runtime(agent).Run(ctx, agents.Turn{RequestID: req, Agent: agent, Number: 1}, sink)
		ht.ended <- turnEnd{out, err}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ht
}

// wait waits for the turn's end.
func (ht *hubTurn) wait(t *testing.T, what string) (agents.Outcome, error) {
	t.Helper()
	select {
	case e := <-ht.ended:
		return e.out, e.err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the turn never ended", what)
		return agents.Outcome{}, nil
	}
}

// eventually waits until cond holds, looking every millisecond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// flood is an agent that reports messages m1…mN as fast as it can, then
// answers "flooded" (or stops when cancelled).
type flood struct{ n int }

func (a flood) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	for i := range a.n {
		if err := sink.Message(ctx, fmt.Sprintf("m%d", i+1)); err != nil {
			return agents.Outcome{}, err
		}
	}
	select {
	case <-t.Cancel:
		return agents.Outcome{Stopped: true}, nil
	default:
	}
	return agents.Outcome{Final: "flooded"}, nil
}

// answer is an agent that answers "ok" at once.
type answer struct{}

func (answer) Run(context.Context, agents.Turn, agents.Sink) (agents.Outcome, error) {
	return agents.Outcome{Final: "ok"}, nil
}

// waiter is an agent that says "started" and runs until cancelled or its
// runner stops.
type waiter struct{}

func (waiter) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	if err := sink.Message(ctx, "started"); err != nil {
		return agents.Outcome{}, err
	}
	select {
	case <-t.Cancel:
		return agents.Outcome{Stopped: true}, nil
	case <-ctx.Done():
		return agents.Outcome{}, ctx.Err()
	}
}

// recSink is the scheduler's side of a turn as the tests see it: it
// records the messages and activities reported; while hold is set, each
// message waits for a value from it (a slow store), which it returns.
type recSink struct {
	hold chan error
	mu   sync.Mutex
	msgs []string
	acts []string
}

func (s *recSink) Session(context.Context, string) error { return nil }
func (s *recSink) Progress(context.Context, int, string) error {
	return nil
}
func (s *recSink) Call(context.Context, agents.TurnEvent) agents.Response { return agents.Response{} }

func (s *recSink) Tool(_ context.Context, phase, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acts = append(s.acts, phase+" "+name)
	return nil
}

func (s *recSink) Message(ctx context.Context, text string) error {
	if s.hold != nil {
		select {
		case err := <-s.hold:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, text)
	return nil
}

// count counts the messages (acts: the activities) holding sub.
func (s *recSink) count(acts bool, sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.msgs
	if acts {
		l = s.acts
	}
	n := 0
	for _, m := range l {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// stuck tells whether the receive loop of c is held handing a frame to
// request req's turn, whose line is full (its Run is busy in the sink).
func (g *hubRig) stuck(c *conn, req string) bool {
	g.hub.mu.Lock()
	line := g.hub.host["laptop"].turns[req]
	g.hub.mu.Unlock()
	return c != nil && c.handing.Load() && line.frames != nil && len(line.frames) == cap(line.frames)
}

// floodStuck connects runner laptop (coder floods, other answers) and
// starts turn r1 of coder with a sink that holds its first message: the
// turn's line fills and the receive loop is held handing it a frame. It
// gives the connection, the turn and its sink.
func floodStuck(t *testing.T, g *hubRig) (*conn, *hubTurn, *recSink) {
	t.Helper()
	g.runner(t, g.url, map[string]agents.Runtime{"coder": flood{n: 100}, "other": answer{}}, nil)
	eventually(t, "laptop connected", func() bool { return g.conn() != nil })
	c := g.conn()
	sink := &recSink{hold: make(chan error)}
	r1 := g.turn(t, "r1", "coder", sink)
	eventually(t, "the receive loop held handing a frame to a full turn", func() bool { return g.stuck(c, "r1") })
	return c, r1, sink
}

// secondHelloRefused has another process of runner laptop say hello
// while c is its connection, lets the probe's bound pass on the hub's
// clock with no answer read, and fails unless c is kept (the new process
// refused) for being busy handing a frame on.
func secondHelloRefused(t *testing.T, g *hubRig, c *conn) {
	t.Helper()
	second := &syncbuf.Buffer{}
	g.runner(t, g.url, map[string]agents.Runtime{"coder": answer{}, "other": answer{}}, second)
	eventually(t, "the hub probing the connection", func() bool { return strings.Contains(g.logs.String(), "probing the connection") })
	eventually(t, "the second process refused or let in", func() bool {
		g.clk.Advance(100 * time.Millisecond) // past the probe's bound, on the hub's clock
		return strings.Contains(second.String(), "already connected from another machine") || g.conn() != c
	})
	if g.conn() != c {
		t.Fatal("the busy connection was replaced by the new process; want it kept, the new one refused")
	}
	if !strings.Contains(g.logs.String(), "is busy handing on a frame or starting; keeping it") {
		t.Fatal("the hub does not say it kept the connection for being busy")
	}
}

// TestProbeKeepsBusyConnection: the receive loop of a connected runner is
// held handing a frame on (its turn is busy in a slow store, the turn's
// line full), so a heartbeat's answer waits unread behind it; another
// process of the runner says hello, and the probe's bound passes with no
// answer read. The connection is alive: it is kept and the new process
// refused, and the turn, once the store goes on, gets every frame of the
// kept connection, each once, in order.
func TestProbeKeepsBusyConnection(t *testing.T) {
	g := newHubRig(t)
	c, r1, sink := floodStuck(t, g)
	secondHelloRefused(t, g, c)
	close(sink.hold)
	out, err := r1.wait(t, "the kept connection's turn")
	if err != nil || out.Final != "flooded" {
		t.Fatalf("the turn ended with %+v, %v; want the answer flooded", out, err)
	}
	want := make([]string, 100)
	for i := range want {
		want[i] = fmt.Sprintf("m%d", i+1)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if !slices.Equal(sink.msgs, want) {
		t.Fatalf("the turn got %d messages %q; want m1…m100, each once, in order", len(sink.msgs), sink.msgs)
	}
}

// holdStore holds the store's writer (another transaction, a slow store)
// until the test ends.
func holdStore(t *testing.T, g *hubRig) {
	t.Helper()
	holding, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- g.db.Update(context.Background(), func(store.Tx) error { close(holding); <-release; return nil })
	}()
	<-holding
	t.Cleanup(func() {
		close(release)
		if err := <-held; err != nil {
			t.Errorf("the transaction holding the store: %v", err)
		}
	})
}

// TestProbeKeepsConnectionRecordingTaskEnd: as TestProbeKeepsBusyConnection,
// the receive loop held recording a background task's end (the store's
// writer busy with another transaction): the connection is kept.
func TestProbeKeepsConnectionRecordingTaskEnd(t *testing.T) {
	g := newHubRig(t)
	g.runner(t, g.url, map[string]agents.Runtime{"coder": answer{}, "other": answer{}}, nil)
	eventually(t, "laptop connected", func() bool { return strings.Contains(g.logs.String(), `msg="runner connected"`) })
	c := g.conn()
	eventually(t, "the receive loop reading", func() bool { return !c.handing.Load() })
	holdStore(t, g)
	if err := g.hub.StartTask(context.Background(), "coder", "R-1", "T-1", []string{"true"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the receive loop held recording the task's end", c.handing.Load)
	secondHelloRefused(t, g, c)
}

// TestProbeKeepsStartingConnection: a connection just attached whose
// start is held writing to the store (when the runner was last seen), its
// receive loop not started yet, is alive too: another process's hello
// probing it meanwhile is refused.
func TestProbeKeepsStartingConnection(t *testing.T) {
	g := newHubRig(t)
	holdStore(t, g)
	g.runner(t, g.url, map[string]agents.Runtime{"coder": answer{}, "other": answer{}}, nil)
	eventually(t, "laptop attached", func() bool { return g.conn() != nil })
	secondHelloRefused(t, g, g.conn())
	if strings.Contains(g.logs.String(), `msg="runner connected"`) {
		t.Fatal("the connection's start went on while the store was held; want it held (the test's premise)")
	}
}

// TestFrameForLeftTurnDropped: the receive loop is held handing a frame
// to a turn whose line is full when that turn's Run returns (the store
// refused a report): the frame is dropped and the loop goes on reading
// the runner's frames, so another turn on the same runner runs to its
// end at once (not after the grace, when the connection is cut).
func TestFrameForLeftTurnDropped(t *testing.T) {
	g := newHubRig(t)
	c, r1, sink := floodStuck(t, g)
	refused := errors.New("refused by the scheduler")
	sink.hold <- refused
	if _, err := r1.wait(t, "the refused turn"); !errors.Is(err, refused) {
		t.Fatalf("the turn whose report was refused ended with %v; want %v", err, refused)
	}
	r2 := g.turn(t, "r2", "other", &recSink{})
	out, err := r2.wait(t, "another turn of the runner")
	if err != nil || out.Final != "ok" {
		t.Fatalf("another turn of the runner ended with %+v, %v; want the answer ok", out, err)
	}
	if g.conn() != c {
		t.Fatal("the runner's connection changed (the held one was given up on); want the same one going on, its frames read")
	}
}

// TestAwayToldOncePerOutage: a runner with two turns running goes away
// past the grace: both turns say so in their activity, and the room is
// told once. It comes back (the turns re-attach) and goes away again: the
// room is told again, once.
func TestAwayToldOncePerOutage(t *testing.T) {
	g := newHubRig(t)
	p := tcpcut.New(t, strings.TrimPrefix(g.url, "http://"))
	g.runner(t, p.URL(), map[string]agents.Runtime{"coder": waiter{}, "other": waiter{}}, nil)
	sinks := []*recSink{{}, {}}
	g.turn(t, "r1", "coder", sinks[0])
	g.turn(t, "r2", "other", sinks[1])
	count := func(acts bool, sub string) (n int) {
		for _, s := range sinks {
			n += s.count(acts, sub)
		}
		return n
	}
	eventually(t, "both turns started on the runner", func() bool { return count(false, "started") == 2 })
	for outage := 1; outage <= 2; outage++ {
		p.Cut()
		eventually(t, "the hub seeing the cut", func() bool { return g.conn() == nil })
		g.clk.Advance(DefaultGrace + time.Second)
		g.hub.Check()
		eventually(t, fmt.Sprintf("both turns interrupted (outage %d)", outage), func() bool {
			return sinks[0].count(true, "interrupted: runner laptop went away") == outage &&
				sinks[1].count(true, "interrupted: runner laptop went away") == outage
		})
		if n := count(false, "runner laptop went away at"); n != outage {
			t.Fatalf("after outage %d the room was told %d times that the runner went away; want %d (once per outage)", outage, n, outage)
		}
		p.Heal()
		eventually(t, "both turns re-attached", func() bool {
			return sinks[0].count(true, agents.PhaseEnd) == outage && sinks[1].count(true, agents.PhaseEnd) == outage
		})
	}
}
