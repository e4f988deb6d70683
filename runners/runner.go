package runners

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/roombridge/roombridge/agents"
)

// RunnerOptions configure `bridge runner`.
type RunnerOptions struct {
	Name string
	// URLs are the bridges, tried in order until one leads.
	URLs  []string
	Token string
	// Agents are the runtimes of the agents this runner hosts.
	Agents map[string]agents.Runtime
	// TLS is the client config of https URLs (nil: system roots).
	TLS *tls.Config
	Log *slog.Logger
	// Retry is the pause between rounds of URLs (default 1s).
	Retry time.Duration
	// RetryMax caps the pause while the bridge refuses the runner because
	// another process of it is connected (doubling from Retry; default
	// 30s).
	RetryMax time.Duration
	// Welcome bounds a connection's start, from the dial to the bridge's
	// welcome (default 15s): a bridge that accepts the connection and then
	// says nothing (its machine gone, a black hole on the way) is given up
	// for the next URL.
	Welcome time.Duration
	// Workdirs are where each agent's background commands run ("": the
	// runner's directory).
	Workdirs map[string]string
	// Follow, if set, checks a leader's URL that a follower named when it
	// refused the runner: the runner tries it next if Follow accepts it
	// (nil: followers' hints are ignored).
	Follow func(url string) error
}

// ErrRefused wraps a refusal that retrying does not cure (a revoked
// token, an agent not configured for the runner): the runner stops.
var ErrRefused = errors.New("refused by the bridge")

// errHeld wraps a refusal that lasts while another connection holds the
// runner or its agents (AlreadyExists): the runner retries with backoff.
var errHeld = errors.New("held elsewhere")

// Runner is the runner's side: it connects out to the bridge, runs the
// turns it is given as local processes and keeps them across reconnects.
type Runner struct {
	o        RunnerOptions
	instance string
	mcp      *mcpProxy

	// life is Run's context: the turns' processes live under it, not under
	// one connection's.
	life context.Context

	mu  sync.Mutex
	cur *rconn
	// curCh is closed, and replaced, each time cur changes (awaitCurrent).
	curCh chan struct{}
	turns map[string]*localTurn
	jobs  map[string]*job // background commands, by task key
}

// rconn is one connection to a bridge.
type rconn struct {
	stream grpc.ClientStream
	base   string // the bridge's URL
	sendMu sync.Mutex
}

func (c *rconn) send(f Frame) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.SendMsg(&f)
}

// NewRunner builds a runner; Run connects it.
func NewRunner(o RunnerOptions) (*Runner, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.Welcome <= 0 {
		o.Welcome = 3 * DefaultHeartbeat
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	r := &Runner{o: o, instance: hex.EncodeToString(b[:]), turns: map[string]*localTurn{}, jobs: map[string]*job{},
		curCh: make(chan struct{})}
	var err error
	if r.mcp, err = newMCPProxy(r); err != nil {
		return nil, err
	}
	return r, nil
}

// Run keeps the runner connected until ctx ends or the bridge refuses it
// for good (ErrRefused). Turns keep running while it reconnects.
func (r *Runner) Run(ctx context.Context) error {
	defer r.mcp.close()
	defer r.stopJobs()
	r.life = ctx
	var b backoff
	for {
		held := false
		queue, tried := slices.Clone(r.o.URLs), map[string]bool{}
		for len(queue) > 0 {
			u := queue[0]
			if queue = queue[1:]; tried[u] {
				continue
			}
			tried[u] = true
			connected, err := r.session(ctx, u)
			if ctx.Err() != nil {
				return nil
			}
			if l := r.leaderHint(u, err); l != "" && !tried[l] {
				queue = append([]string{l}, queue...)
			}
			if connected {
				b = backoff{}
			}
			switch {
			case errors.Is(err, ErrRefused):
				return err
			case errors.Is(err, errHeld):
				held = true
				if b.changed(err.Error()) {
					r.o.Log.Warn("runner: refused while another connection holds it; retrying with backoff", "url", u, "error", err, "max", r.o.RetryMax)
				}
			default:
				r.o.Log.Warn("runner: connection ended; trying the next bridge", "url", u, "error", err)
			}
		}
		pause := r.o.Retry
		if held {
			pause = b.next(r.o.Retry, r.o.RetryMax)
		} else {
			b = backoff{}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// backoff is the pause while the runner is refused as held elsewhere, and
// the refusal last logged.
type backoff struct {
	pause  time.Duration
	logged string
}

// next doubles the pause from base, capped at most.
func (b *backoff) next(base, most time.Duration) time.Duration {
	b.pause = min(max(2*b.pause, base), most)
	return b.pause
}

// changed tells whether why differs from the refusal last logged (and
// remembers it).
func (b *backoff) changed(why string) bool {
	if why == b.logged {
		return false
	}
	b.logged = why
	return true
}

// dial opens the stream to the bridge at u.
func (r *Runner) dial(ctx context.Context, u string) (*grpc.ClientConn, grpc.ClientStream, error) {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return nil, nil, fmt.Errorf("runner: bridge URL %q: want http://host:port or https://host:port", u)
	}
	creds := insecure.NewCredentials()
	if pu.Scheme == "https" {
		creds = credentials.NewTLS(r.o.TLS)
	}
	cc, err := grpc.NewClient("passthrough:///"+pu.Host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("runner: dial %s: %w", u, err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.o.Token)
	st, err := cc.NewStream(ctx, &serviceDesc.Streams[0], connectMethod, grpc.CallContentSubtype(codecName))
	if err != nil {
		_ = cc.Close()
		return nil, nil, fmt.Errorf("runner: connect %s: %w", u, err)
	}
	return cc, st, nil
}

// session is one connection: hello, welcome, then frames until it
// breaks; connected tells whether the bridge welcomed it.
func (r *Runner) session(ctx context.Context, u string) (connected bool, _ error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	late := time.AfterFunc(r.o.Welcome, cancel)
	defer late.Stop()
	cc, st, err := r.dial(ctx, u)
	if err != nil {
		return false, r.unwelcome(late, err)
	}
	defer cc.Close()
	c := &rconn{stream: st, base: u}
	r.mu.Lock()
	live := slices.Sorted(maps.Keys(r.turns))
	r.mu.Unlock()
	names := slices.Sorted(maps.Keys(r.o.Agents))
	hello := Frame{Type: FrameHello, Runner: r.o.Name, Instance: r.instance, Agents: names, Live: live, Tasks: r.jobKeys()}
	var welcome Frame
	err = c.send(hello)
	if err == nil || errors.Is(err, io.EOF) {
		// A send that found the stream ended (io.EOF): its status, and
		// the trailer with it, come with the next receive.
		err = st.RecvMsg(&welcome)
	}
	if err != nil {
		err = refusal(err, nil)
		if l := st.Trailer().Get(LeaderTrailer); len(l) == 1 {
			err = &notLeader{leader: l[0], err: err}
		}
		return false, r.unwelcome(late, err)
	}
	if !late.Stop() {
		return false, fmt.Errorf("runner: no welcome from the bridge within %v", r.o.Welcome)
	}
	if welcome.Type != FrameWelcome {
		return false, fmt.Errorf("runner: the bridge's first frame is %q, not its welcome", welcome.Type)
	}
	r.o.Log.Info("runner connected", "url", u, "agents", len(names), "live", len(live))
	r.mu.Lock()
	r.setCurrentLocked(c)
	r.mu.Unlock()
	r.resendJobEnds(c)
	defer func() {
		r.mu.Lock()
		if r.cur == c {
			r.setCurrentLocked(nil)
		}
		r.mu.Unlock()
	}()
	beat := welcome.Heartbeat
	if beat <= 0 {
		beat = DefaultHeartbeat
	}
	return true, r.serve(ctx, c, beat)
}

// notLeader is a follower's refusal that names the leader's URL.
type notLeader struct {
	leader string
	err    error
}

func (e *notLeader) Error() string { return e.err.Error() }
func (e *notLeader) Unwrap() error { return e.err }

// leaderHint is the leader's URL the bridge at u named when it refused
// the runner (err), if Follow accepts it; "" otherwise.
func (r *Runner) leaderHint(u string, err error) string {
	var nl *notLeader
	if !errors.As(err, &nl) || nl.leader == u || r.o.Follow == nil {
		return ""
	}
	if ferr := r.o.Follow(nl.leader); ferr != nil {
		r.o.Log.Warn("runner: a follower named a leader it may not follow", "url", u, "leader", nl.leader, "error", ferr)
		return ""
	}
	r.o.Log.Info("runner: the bridge does not lead; trying the leader it named", "url", u, "leader", nl.leader)
	return nl.leader
}

// unwelcome says why a connection's start failed (call once, on the
// failure): err, or that no welcome came within o.Welcome when late had
// fired and cancelled the start.
func (r *Runner) unwelcome(late *time.Timer, err error) error {
	if late.Stop() {
		return err
	}
	return fmt.Errorf("runner: no welcome from the bridge within %v (%v)", r.o.Welcome, err)
}

// refusal turns a stream error into ErrRefused when retrying cannot help.
func refusal(err error, _ grpc.ClientStream) error {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrRefused, status.Convert(err).Message())
	case codes.AlreadyExists:
		return fmt.Errorf("%w: %s", errHeld, status.Convert(err).Message())
	}
	return err
}

// serve reads the bridge's frames and sends heartbeats; a bridge silent
// for three heartbeats is taken as gone.
func (r *Runner) serve(ctx context.Context, c *rconn, beat time.Duration) error {
	frames := make(chan Frame)
	errs := make(chan error, 1)
	go func() {
		for {
			var f Frame
			if err := c.stream.RecvMsg(&f); err != nil {
				errs <- refusal(err, nil)
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	t := time.NewTicker(beat)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case f := <-frames:
			last = time.Now()
			r.handle(ctx, c, f)
		case <-t.C:
			if time.Since(last) > 3*beat {
				return errors.New("runner: the bridge is silent")
			}
			if err := c.send(Frame{Type: FrameHeartbeat}); err != nil {
				return err
			}
		}
	}
}

// handle acts on one frame of the bridge.
func (r *Runner) handle(ctx context.Context, c *rconn, f Frame) {
	r.mu.Lock()
	lt := r.turns[f.Request]
	r.mu.Unlock()
	switch f.Type {
	case FrameHeartbeat:
		// Answered: the bridge probes a connection this way when another
		// process of this runner says hello.
		_ = c.send(Frame{Type: FrameHeartbeat})
	case FrameTurn:
		if f.Turn == nil {
			return
		}
		// The same turn (by its number) is re-attached, ended or not
		// (an end not yet recorded is resent); a turn of another number
		// kept here is over (its end's ack was lost), or abandoned.
		if lt != nil && lt.number == f.Turn.Number {
			lt.reattach(c, *f.Turn)
			return
		}
		if lt != nil {
			lt.abandon("replaced by another of its request")
		}
		r.start(r.life, c, *f.Turn)
	case FrameCancel, FrameDrain, FrameReply:
		switch {
		case lt == nil:
		case f.Type == FrameCancel && f.Ended:
			// The request has ended with no turn of the bridge's on it
			// (Hub.stopEnded): nobody will record this turn's end or
			// acknowledge it, so it is forgotten now, not kept for life.
			lt.abandon("whose request has ended")
			r.forget(f.Request, lt)
		default:
			lt.control(f)
		}
	case FrameTask, FrameTaskStop, FrameTaskAck:
		r.handleJob(f)
	case FrameAck:
		if lt != nil && lt.number == f.Number && lt.acked(f.Seq) {
			r.forget(f.Request, lt)
		}
	}
}

// forget drops turn lt of request req, unless another has replaced it.
func (r *Runner) forget(req string, lt *localTurn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.turns[req] == lt {
		delete(r.turns, req)
	}
}

// Buffered is how many frames the runner keeps for the bridge (its turns'
// frames not acknowledged yet): bounded by about AckEvery a turn.
func (r *Runner) Buffered() int {
	r.mu.Lock()
	turns := slices.Collect(maps.Values(r.turns))
	r.mu.Unlock()
	n := 0
	for _, lt := range turns {
		n += lt.buffered()
	}
	return n
}

// setCurrentLocked makes c the current connection and wakes those waiting
// for a change (localTurn.awaitAttached). r.mu is held.
func (r *Runner) setCurrentLocked(c *rconn) {
	r.cur = c
	close(r.curCh)
	r.curCh = make(chan struct{})
}

// currentAndChange is the current connection and a channel closed when it
// changes.
func (r *Runner) currentAndChange() (*rconn, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, r.curCh
}

// current is the connection frames go out on (nil while away).
func (r *Runner) current() *rconn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}
