package runners

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store"
)

// Defaults of HubOptions.
const (
	DefaultGrace     = 30 * time.Second
	DefaultHeartbeat = 5 * time.Second
	DefaultProbe     = 2 * time.Second
)

// HubOptions configure the bridge's side.
type HubOptions struct {
	Store store.Store
	Clock clock.Clock
	Log   *slog.Logger
	// Hosts names each runner-hosted agent's runner ("": any runner may
	// host it, the first to connect).
	Hosts map[string]string
	// Grace is how long a runner may be silent before its turns are
	// interrupted (default DefaultGrace).
	Grace time.Duration
	// Heartbeat is the period of heartbeats both ways (default
	// DefaultHeartbeat).
	Heartbeat time.Duration
	// Watch is how often the watchdog looks (default Heartbeat/2).
	Watch time.Duration
	// Probe is how long a connected runner has to answer a heartbeat when
	// another process of it says hello (default DefaultProbe, on Clock):
	// no answer, and the new process replaces the connection.
	Probe time.Duration
	// Leading tells whether this instance leads (nil: always). A follower
	// refuses runners.
	Leading func() bool
	// LeaderURL, if set, is the leader's advertised URL, which a follower
	// gives a runner it refuses ("": none known).
	LeaderURL func(ctx context.Context) string
	// Requests, if set, is where the hub says why an away runner's agents'
	// queued requests wait (their activity; nil: it does not).
	Requests *requests.Service
	// Tasks, if set, records the ends of the background commands run on
	// runners (nil: task_end frames are ignored).
	Tasks TaskHost
}

// Hub is the bridge's side: it accepts runners (Handler), knows which
// runner hosts which agent, watches heartbeats and gives each
// runner-hosted agent its Runtime.
type Hub struct {
	o HubOptions
	// refusals bounds the auth_refused records of refused runners.
	refusals rooms.Refusals
	srv      *grpc.Server
	mu       sync.Mutex
	host     map[string]*host // by runner name
	// reconnects counts connections of a runner seen before.
	reconnects int
	// started is when this bridge began leading: a runner not seen since
	// is away once the grace has passed from then.
	started time.Time
	// life is Run's context (nil outside Run); notes are the workers
	// keeping the notes of away runners' queued requests.
	life  context.Context
	notes sync.WaitGroup
	// bump is closed (and replaced) at every change of a runner's
	// connection or state (Changed).
	bump chan struct{}
}

// host is one runner as the bridge sees it.
type host struct {
	name     string
	c        *conn // nil: not connected
	agents   []string
	since    time.Time
	lastSeen time.Time
	// gone: silent past the grace; told: the room was told of this outage;
	// noting: how many workers keep its agents' queued requests' notes
	// (one per agent, from the outage until they have taken the notes off).
	noting     int
	gone, told bool
	// cfg are the agents the bridge's config gives this runner.
	cfg []string
	// change is closed (and replaced) whenever c or gone changes.
	change chan struct{}
	turns  map[string]turnLine // the turns in flight, by request
}

// turnLine is how the receive loop hands a turn its frames: left is
// closed when the turn's Run returns (a frame for it then is dropped, not
// waited on: the loop must go on reading the runner's other frames).
type turnLine struct {
	frames chan Frame
	left   chan struct{}
}

// conn is one runner connection.
type conn struct {
	instance string
	stream   grpc.ServerStream
	sendMu   sync.Mutex
	live     map[string]bool
	tasks    map[string]bool // background commands sent on it (h.mu)
	closed   chan struct{}
	once     sync.Once
	why      error
	// probed is closed by the next frame received after a probe (h.mu).
	probed chan struct{}
	// beating: a heartbeat's send has not returned yet.
	beating atomic.Bool
	// handing: no frame is read meanwhile (a probe's answer waits unread):
	// the receive loop is handing one on (to its turn, or a task end to
	// the store) or has not started (the connection's start uses the store).
	handing atomic.Bool
}

func (c *conn) send(f Frame) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.SendMsg(&f)
}

// heartbeat sends a heartbeat on its own goroutine, unless the last one is
// still being sent: a dead peer's full flow-control window blocks a send
// until the connection is closed, and neither the watchdog nor a probe
// may wait for that.
func (c *conn) heartbeat() {
	if !c.beating.CompareAndSwap(false, true) {
		return
	}
	go func() {
		_ = c.send(Frame{Type: FrameHeartbeat})
		c.beating.Store(false)
	}()
}

// close ends the connection with why (what the runner is told).
func (c *conn) close(why error) {
	c.once.Do(func() { c.why = why; close(c.closed) })
}

// NewHub builds the bridge's side.
func NewHub(o HubOptions) *Hub {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Watch <= 0 {
		o.Watch = o.Heartbeat / 2
	}
	if o.Probe <= 0 {
		o.Probe = DefaultProbe
	}
	h := &Hub{o: o, host: map[string]*host{}, started: o.Clock.Now(), bump: make(chan struct{})}
	for _, a := range slices.Sorted(maps.Keys(o.Hosts)) {
		if name := o.Hosts[a]; name != "" {
			x := h.hostLocked(name)
			x.cfg = append(x.cfg, a)
		}
	}
	h.srv = grpc.NewServer()
	h.srv.RegisterService(&serviceDesc, h)
	return h
}

// Handler serves the runner service (gRPC over HTTP/2; mount it at
// Pattern).
func (h *Hub) Handler() http.Handler { return h.srv }

// Pattern is where Handler is mounted on the API's mux.
const Pattern = "/" + ServiceName + "/"

func (h *Hub) hostLocked(name string) *host {
	x := h.host[name]
	if x == nil {
		x = &host{name: name, change: make(chan struct{}), turns: map[string]turnLine{}}
		h.host[name] = x
	}
	return x
}

// changed wakes the turns waiting on x and the watchers of Changed (call
// with h.mu held).
func (h *Hub) changed(x *host) {
	close(x.change)
	x.change = make(chan struct{})
	close(h.bump)
	h.bump = make(chan struct{})
}

// Changed is closed at the next change of any runner's connection or
// state (connected, dropped, away past the grace): what Statuses shows
// changes then (the web room redraws). It is in memory only: no store
// write, nothing per heartbeat.
func (h *Hub) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bump
}

// connect serves one runner's stream.
func (h *Hub) connect(stream grpc.ServerStream) error {
	ctx := stream.Context()
	if h.o.Leading != nil && !h.o.Leading() {
		return h.notLeading(stream)
	}
	var hello Frame
	if err := stream.RecvMsg(&hello); err != nil {
		return err
	}
	if hello.Type != FrameHello || hello.Runner == "" {
		return status.Error(codes.InvalidArgument, "the first frame must be a hello naming the runner")
	}
	switch _, err := authenticate(ctx, h.o.Store, hello.Runner, bearer(ctx)); {
	case errors.Is(err, store.ErrNotFound):
		h.refuseToken(ctx, hello.Runner)
		return status.Errorf(codes.Unauthenticated, "runner %s: unknown or revoked token", hello.Runner)
	case err != nil:
		// A failure of ours (the store unreachable): the runner retries;
		// Unauthenticated would make it give up for good.
		h.o.Log.Error("runner not authenticated: store error", "runner", hello.Runner, "error", err)
		return status.Errorf(codes.Unavailable, "runner %s: the bridge cannot check the token now (store unavailable); retry", hello.Runner)
	}
	c := &conn{instance: hello.Instance, stream: stream, live: map[string]bool{}, tasks: map[string]bool{}, closed: make(chan struct{})}
	for _, id := range hello.Live {
		c.live[id] = true
	}
	c.handing.Store(true) // until receive reads its frames
	// The welcome is the connection's first frame: a turn that attach
	// wakes sends its frame only after it (the runner reads the first
	// frame as the welcome, and a turn sent before it was lost).
	stale := h.probe(ctx, hello)
	c.sendMu.Lock()
	if err := h.attach(hello, c, stale); err != nil {
		c.sendMu.Unlock()
		h.o.Log.Warn("runner refused", "runner", hello.Runner, "error", err)
		return err
	}
	defer h.detach(hello.Runner, c)
	err := c.stream.SendMsg(&Frame{Type: FrameWelcome, Heartbeat: h.o.Heartbeat})
	c.sendMu.Unlock()
	if err != nil {
		return err
	}
	_ = touch(context.WithoutCancel(ctx), h.o.Store, hello.Runner, h.o.Clock.Now())
	h.reconcileTasks(ctx, hello, c)
	h.stopEnded(ctx, hello, c)
	h.o.Log.Info("runner connected", "runner", hello.Runner, "agents", strings.Join(hello.Agents, ","), "live", len(hello.Live))
	recvErr := make(chan error, 1)
	go func() { recvErr <- h.receive(hello.Runner, c) }()
	select {
	case err := <-recvErr:
		return err
	case <-c.closed:
		return c.why
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopEnded cancels the turns the runner says are alive whose request has
// ended meanwhile (cancelled while no leader ran it, or while its runner
// was cut off: it ended without a turn of the scheduler's to tell the
// runner): their processes stop instead of working on unattended, and the
// runner forgets them (Frame.Ended: no end of theirs will be recorded). A
// request that cannot be read is left alone (its turn, if any, is the
// scheduler's to settle).
func (h *Hub) stopEnded(ctx context.Context, hello Frame, c *conn) {
	if h.o.Requests == nil {
		return
	}
	for _, s := range hello.Live {
		id, err := requests.ParseID(s)
		if err != nil {
			continue
		}
		r, err := h.o.Requests.Get(ctx, id)
		if err != nil || !r.State.Terminal() {
			continue
		}
		h.o.Log.Info("runner: a live turn's request has ended; stopping it", "runner", hello.Runner, "request_id", s, "state", r.State.String())
		_ = c.send(Frame{Type: FrameCancel, Request: s, Ended: true})
	}
}

// refuseToken logs a runner refused for its token and audits it at the
// bounded rate of the other unauthenticated refusals (rooms.Refusals), with
// at most MaxNameAudited bytes of the name it gave: a flood of forged
// hellos cannot fill the store.
func (h *Hub) refuseToken(ctx context.Context, runner string) {
	name := clip.Line(runner, MaxNameAudited, clip.Bytes)
	h.o.Log.Warn("runner refused", "runner", name, "error", "unknown or revoked token")
	err := h.refusals.Audit(ctx, h.o.Store, "runner\x00token", audit.Record{Time: h.o.Clock.Now().UTC(),
		Actor: "runner:" + name, Surface: "runner", Action: "auth_refused", Detail: "runner " + name + ": unknown or revoked token"})
	if err != nil {
		h.o.Log.Error("auditing a refused runner", "error", err)
	}
}

// MaxNameAudited bounds the runner name a refusal's log line and audit
// record keep.
const MaxNameAudited = 64

// bearer is the token of the stream's authorization metadata.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return tok
		}
	}
	return ""
}

// attach makes c the connection of its runner, or refuses it; stale is
// a connection of another process of it that did not answer a probe (nil:
// none), which c replaces.
func (h *Hub) attach(hello Frame, c *conn, stale *conn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range hello.Agents {
		if h.o.Hosts[a] != hello.Runner {
			return status.Errorf(codes.PermissionDenied, "runner %s may not host agent %s (the bridge's config: agents.%s.kind runner, runner %s)",
				hello.Runner, a, a, hello.Runner)
		}
		for _, x := range h.host {
			if x.c != nil && x.name != hello.Runner && slices.Contains(x.agents, a) {
				return status.Errorf(codes.AlreadyExists, "agent %s is already hosted by runner %s (connected since %s)",
					a, x.name, x.since.Format("15:04"))
			}
		}
	}
	x := h.hostLocked(hello.Runner)
	if x.c != nil && x.c.instance != c.instance && x.c != stale {
		return status.Errorf(codes.AlreadyExists, "runner %s is already connected from another machine (since %s): agents %s are hosted there",
			x.name, x.since.Format("15:04"), strings.Join(x.agents, ", "))
	}
	if x.c == stale && stale != nil {
		h.o.Log.Warn("runner connection did not answer a probe: replaced by the runner's new process", "runner", x.name, "probe", h.o.Probe)
		x.c.close(status.Error(codes.Aborted, "no answer to a probe: replaced by a new process of the same runner"))
	} else if x.c != nil {
		x.c.close(status.Error(codes.Aborted, "replaced by a new connection of the same runner"))
	}
	if !x.lastSeen.IsZero() {
		h.reconnects++
	}
	now := h.o.Clock.Now()
	x.c, x.agents, x.since, x.lastSeen, x.gone, x.told = c, hello.Agents, now, now, false, false
	h.changed(x)
	return nil
}

// probe asks the connection of hello's runner, when another process of
// it holds one, to answer a heartbeat within o.Probe: after a reboot (the
// old process gone with no goodbye) the bridge would notice only by the
// grace. It returns that connection when it did not answer (or has
// ended), nil when it answered or there is none.
func (h *Hub) probe(ctx context.Context, hello Frame) *conn {
	h.mu.Lock()
	x := h.host[hello.Runner]
	if x == nil || x.c == nil || x.c.instance == hello.Instance {
		h.mu.Unlock()
		return nil
	}
	old := x.c
	if old.probed == nil {
		old.probed = make(chan struct{})
	}
	answered := old.probed
	h.mu.Unlock()
	h.o.Log.Info("runner: another process says hello; probing the connection", "runner", hello.Runner, "probe", h.o.Probe)
	old.heartbeat()
	start := h.o.Clock.Now()
	t := time.NewTicker(min(h.o.Watch, h.o.Probe/10))
	defer t.Stop()
	for {
		select {
		case <-answered:
			return nil
		case <-old.closed:
			return old
		case <-ctx.Done():
			return nil
		case <-t.C:
			if h.o.Clock.Now().Sub(start) < h.o.Probe {
				continue
			}
			if old.handing.Load() {
				// Busy with a frame the runner sent, or its start, and a
				// slow store: the connection is alive, its answer unread.
				h.o.Log.Info("runner: the probed connection is busy handing on a frame or starting; keeping it", "runner", hello.Runner)
				return nil
			}
			return old
		}
	}
}

// detach forgets c when it is still its runner's connection.
func (h *Hub) detach(name string, c *conn) {
	c.close(nil)
	h.mu.Lock()
	x := h.host[name]
	if x != nil && x.c == c {
		x.c = nil
		h.changed(x)
	}
	h.mu.Unlock()
	_ = touch(context.Background(), h.o.Store, name, h.o.Clock.Now())
	h.o.Log.Info("runner disconnected", "runner", name)
}

// receive routes the runner's frames to the turns they are about.
func (h *Hub) receive(name string, c *conn) error {
	c.handing.Store(false)
	for {
		var f Frame
		if err := c.stream.RecvMsg(&f); err != nil {
			return err
		}
		h.mu.Lock()
		x := h.host[name]
		var line turnLine
		if c.probed != nil {
			close(c.probed) // any frame answers a probe
			c.probed = nil
		}
		if x != nil && x.c == c {
			x.lastSeen = h.o.Clock.Now()
			line = x.turns[f.Request]
		}
		h.mu.Unlock()
		if f.Type == FrameTaskEnd {
			if f.Job != nil {
				c.handing.Store(true)
				h.taskEnd(c.stream.Context(), name, c, f.Job)
				c.handing.Store(false)
			}
			continue
		}
		if line.frames == nil || f.Type == FrameHeartbeat {
			continue
		}
		c.handing.Store(true)
		select {
		case line.frames <- f:
		case <-line.left:
		case <-c.closed:
			return nil
		}
		c.handing.Store(false)
	}
}

// Run watches the runners' heartbeats and sends the bridge's until ctx
// ends; then it closes every connection (the runners reconnect to the
// next leader).
func (h *Hub) Run(ctx context.Context) error {
	h.mu.Lock()
	h.started, h.life = h.o.Clock.Now(), ctx
	for _, x := range h.host {
		x.noting = 0    // the last term's workers have ended (Run waits for them)
		h.startNotes(x) // the notes an earlier leader left: off again
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.life = nil
		h.mu.Unlock()
		h.notes.Wait()
	}()
	t := time.NewTicker(h.o.Watch)
	defer t.Stop()
	beat := time.Now() // heartbeats are the wire's: real time
	for {
		select {
		case <-ctx.Done():
			h.closeAll(status.Error(codes.Unavailable, "this bridge stopped leading"))
			return nil
		case <-t.C:
			h.watch(false)
			if now := time.Now(); now.Sub(beat) >= h.o.Heartbeat {
				beat = now
				h.watch(true)
			}
		}
	}
}

// Check runs one round of the watchdog at once (tests with a fake clock).
func (h *Hub) Check() { h.watch(false) }

// watch closes the connections of runners silent past the grace and marks
// them gone; with heartbeat it sends the bridge's heartbeats.
func (h *Hub) watch(heartbeat bool) {
	now := h.o.Clock.Now()
	h.mu.Lock()
	var beat []*conn
	for _, x := range h.host {
		// Every runner has a whole grace from when this bridge began
		// leading, seen before or not.
		ref := x.lastSeen
		if ref.Before(h.started) {
			ref = h.started
		}
		silent := !ref.IsZero() && now.Sub(ref) > h.o.Grace
		switch {
		case x.c != nil && silent:
			h.o.Log.Warn("runner silent past the grace; its turns are interrupted", "runner", x.name, "grace", h.o.Grace)
			x.c.close(status.Error(codes.DeadlineExceeded, "no heartbeat within the grace"))
			x.c, x.gone = nil, true
			h.changed(x)
			h.startNotes(x)
		case x.c == nil && silent && !x.gone:
			h.o.Log.Warn("runner away past the grace", "runner", x.name, "grace", h.o.Grace, "seen", !x.lastSeen.IsZero())
			x.gone = true
			h.changed(x)
			h.startNotes(x)
		case x.c != nil && heartbeat:
			beat = append(beat, x.c)
		}
	}
	h.mu.Unlock()
	for _, c := range beat {
		c.heartbeat()
	}
}

func (h *Hub) closeAll(why error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.host {
		if x.c != nil {
			x.c.close(why)
		}
	}
}

// Revoke deletes runner name's token and closes its connection.
func (h *Hub) Revoke(ctx context.Context, name string) error {
	if err := remove(ctx, h.o.Store, name); err != nil {
		return fmt.Errorf("runners: revoke %s: %w", name, err)
	}
	h.mu.Lock()
	if x := h.host[name]; x != nil && x.c != nil {
		x.c.close(status.Errorf(codes.Unauthenticated, "runner %s: token revoked", name))
	}
	h.mu.Unlock()
	h.o.Log.Info("runner revoked", "runner", name)
	return nil
}

// LeaderTrailer is the trailer key in which a follower that refuses a
// runner names the leader's URL.
const LeaderTrailer = "roombridge-leader-url"

// notLeading refuses a runner at a follower, naming the leader's URL (a
// trailer) when the election tells it.
func (h *Hub) notLeading(stream grpc.ServerStream) error {
	msg := "this bridge does not lead: try the next URL"
	if h.o.LeaderURL != nil {
		if u := h.o.LeaderURL(stream.Context()); u != "" {
			stream.SetTrailer(metadata.Pairs(LeaderTrailer, u))
			msg = "this bridge does not lead: the leader is at " + u
		}
	}
	return status.Error(codes.FailedPrecondition, msg)
}
