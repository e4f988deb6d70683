package runners

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/store"
)

// Runtime is the agents.Runtime of an agent hosted by a runner: it sends
// each turn to the runner that hosts the agent and feeds what comes back
// to the scheduler's Sink. While the runner is away the turn waits (past
// the grace it is marked interrupted); when the runner is back the turn
// re-attaches, or starts again with the same session.
type Runtime struct {
	Hub   *Hub
	Agent string
}

var _ agents.Runtime = (*Runtime)(nil)

// Runtime gives agent's runtime.
func (h *Hub) Runtime(agent string) *Runtime { return &Runtime{Hub: h, Agent: agent} }

var _ agents.Settler = (*Runtime)(nil)

// Settled implements agents.Settler: t's end is recorded, so the runner
// may forget the turn (an ack without a sequence number). An ack lost
// with the connection leaves the ended turn kept at the runner, harmless:
// a turn of another number replaces it.
func (r *Runtime) Settled(_ context.Context, t agents.Turn) {
	if _, c := r.Hub.agentConn(r.Agent, ""); c != nil {
		_ = c.send(Frame{Type: FrameAck, Request: t.RequestID, Number: t.Number})
	}
}

// turnRun is one Run's state.
type turnRun struct {
	h      *Hub
	t      agents.Turn
	sink   agents.Sink
	frames chan Frame
	left   chan struct{} // closed when Run returns (turnLine)
	seq    int           // the last frame applied
	acked  int           // the last frame acknowledged to the runner
	sent   *conn         // the connection the turn was last sent on
	runner string        // the runner it was last sent to
	// interrupted: the runner went away past the grace during this turn.
	interrupted   bool
	cancel, drain <-chan struct{}
	replies       chan Frame
	// pending are replies to calls not yet sent (the runner was away);
	// calls are the calls this Run served, by ID: nil while being served,
	// then the reply (a call resent after a reconnect is never served
	// twice by one Run: it gets its reply again).
	pending []Frame
	calls   map[string]*Frame
	// told are the cancel and drain this Run told the runner: told again
	// on each connection the turn is sent on (one may have broken first).
	told []string
	// marks, when the sink is the scheduler's, stores each applied
	// frame's Seq with the frame's own write (nil: tr.seq is memory only).
	marks markSink
}

// markSink is the scheduler's sink as a runner turn uses it: where the
// turn stands (the Seq of the last frame applied) is stored with each
// report, in the report's own transaction, so that any leader (this one
// after a restart, a new one) asks the runner for the frames after it and
// applies each durable report exactly once. *agents.sink implements it.
type markSink interface {
	agents.Sink
	// Mark is the last Seq stored for the turn (0: none).
	Mark(ctx context.Context) (int, error)
	// Marking is the sink whose reports also store seq.
	Marking(seq int) agents.Sink
}

// flush sends the pending replies on c.
func (tr *turnRun) flush(c *conn) {
	for c != nil && len(tr.pending) > 0 {
		if c.send(tr.pending[0]) != nil {
			return
		}
		tr.pending = tr.pending[1:]
	}
}

// Run implements agents.Runtime.
func (r *Runtime) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	tr := &turnRun{h: r.Hub, t: t, sink: sink, frames: make(chan Frame, 64), left: make(chan struct{}), cancel: t.Cancel, drain: t.Drain,
		replies: make(chan Frame, 8), calls: map[string]*Frame{}}
	if ms, ok := sink.(markSink); ok {
		mark, err := ms.Mark(ctx)
		if err != nil {
			return agents.Outcome{}, err
		}
		tr.marks, tr.seq = ms, mark
	}
	defer tr.leave()
	for {
		x, c, gone, change := tr.where(r.Agent)
		if c == nil && slices.Contains(tr.told, FrameCancel) {
			return tr.cancelledAway(ctx, x), nil
		}
		if c != nil && c != tr.sent {
			if err := tr.send(ctx, x, c); err != nil {
				return agents.Outcome{}, err
			}
		}
		if gone && !tr.interrupted {
			tr.interrupt(ctx, x)
		}
		select {
		case f := <-tr.frames:
			if done, out, err := tr.apply(ctx, f); done {
				return out, err
			}
		case f := <-tr.replies:
			tr.calls[f.Response.ID] = &f
			tr.pending = append(tr.pending, f)
			tr.flush(c)
		case <-change:
		case <-tr.cancel:
			tr.cancel, tr.told = nil, append(tr.told, FrameCancel)
			tr.tell(c, FrameCancel) // with no runner to tell, the next round ends the turn
		case <-tr.drain:
			tr.drain = nil
			if c == nil {
				return agents.Outcome{}, fmt.Errorf("runner away: %w", agents.ErrInterrupted)
			}
			tr.told = append(tr.told, FrameDrain)
			tr.tell(c, FrameDrain)
		case <-ctx.Done():
			return agents.Outcome{}, fmt.Errorf("%w: %w", agents.ErrInterrupted, ctx.Err())
		}
	}
}

// cancelledAway ends a cancelled turn whose runner is cut off (or does
// not host the agent): no process of ours runs it, so this is the safe
// point, and the request is cancelled now rather than when the runner
// comes back. The runner hears of it when it does: its hello lists the
// turn live, and the hub stops it (stopEnded).
func (tr *turnRun) cancelledAway(ctx context.Context, x *host) agents.Outcome {
	tr.h.o.Log.InfoContext(ctx, "runner: a turn cancelled while its runner is away ends now",
		"runner", x.name, "request_id", tr.t.RequestID)
	return agents.Outcome{Stopped: true}
}

// where finds the runner hosting agent and registers the turn with it.
func (tr *turnRun) where(agent string) (x *host, c *conn, gone bool, change <-chan struct{}) {
	h := tr.h
	h.mu.Lock()
	defer h.mu.Unlock()
	name := h.o.Hosts[agent]
	tr.runner = name
	x = h.hostLocked(name)
	x.turns[tr.t.RequestID] = turnLine{frames: tr.frames, left: tr.left}
	if x.c != nil && !slices.Contains(x.agents, agent) {
		return x, nil, x.gone, x.change
	}
	return x, x.c, x.gone, x.change
}

func (tr *turnRun) leave() {
	h := tr.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.host[tr.runner]; x != nil && x.turns[tr.t.RequestID].frames == tr.frames {
		delete(x.turns, tr.t.RequestID)
	}
	close(tr.left)
}

// send gives the turn to connection c: a re-attach when it is live there,
// else a start (with the session it has, resumed when it ran before).
func (tr *turnRun) send(ctx context.Context, x *host, c *conn) error {
	h := tr.h
	h.mu.Lock()
	live := c.live[tr.t.RequestID]
	h.mu.Unlock()
	first := tr.sent == nil
	restart := !first && !live
	tr.sent = c
	w := &Turn{RequestID: tr.t.RequestID, Agent: tr.t.Agent, Session: tr.t.Session, Resumed: tr.t.Resumed || restart,
		Input: tr.t.Input, MCPToken: tr.t.MCPToken, After: tr.seq, Number: tr.t.Number}
	if err := c.send(Frame{Type: FrameTurn, Request: tr.t.RequestID, Turn: w}); err != nil {
		h.o.Log.Warn("runner: sending a turn failed; waiting for the runner", "runner", x.name, "request_id", tr.t.RequestID, "error", err)
		tr.sent = nil
		return nil
	}
	tr.flush(c)
	for _, typ := range tr.told {
		tr.tell(c, typ) // a cancel or drain told on a connection that broke
	}
	if tr.seq > 0 {
		tr.ack() // the runner may drop what the store has (a new leader never acked it)
	}
	// A turn started again (its process died: a runner restart, within
	// the grace or past it) tells its thread; one that never ran does not.
	if restart || tr.interrupted && !live && tr.t.Resumed {
		_ = tr.sink.Message(ctx, fmt.Sprintf("resumed %s on runner %s", h.o.Clock.Now().Format("15:04"), x.name))
	}
	if tr.interrupted {
		_ = tr.sink.Tool(ctx, agents.PhaseEnd, "")
		tr.interrupted = false
	}
	return nil
}

// interrupt marks the turn interrupted: its activity says why; the room is
// told once per outage (by the first turn that sees it).
func (tr *turnRun) interrupt(ctx context.Context, x *host) {
	tr.interrupted = true
	h := tr.h
	h.mu.Lock()
	tell := !x.told
	x.told = true
	at, seen := h.since(x)
	names := x.agents
	if len(names) == 0 {
		names = x.cfg
	}
	names = slices.Clone(names)
	h.mu.Unlock()
	_ = tr.sink.Tool(ctx, agents.PhaseStart, awayActivity(x.name, at, seen))
	if tell {
		_ = tr.sink.Message(ctx, awayMessage(x.name, at, seen, names))
	}
}

func (tr *turnRun) tell(c *conn, typ string) {
	if c != nil {
		_ = c.send(Frame{Type: typ, Request: tr.t.RequestID})
	}
}

// apply feeds frame f to the sink, once (frames resent after a reconnect
// are skipped). done: the turn ended with out, err.
func (tr *turnRun) apply(ctx context.Context, f Frame) (done bool, out agents.Outcome, err error) {
	switch {
	case f.Type == FrameCall:
		// A call not answered yet is resent whatever its Seq (a new
		// leader must serve it: the call journal makes it idempotent).
		tr.call(ctx, f)
	case f.Seq <= tr.seq:
		return false, out, nil
	case f.Type == FrameEvent:
		failpoint.Hit(failpoint.FrameReceived)
		if err := tr.event(ctx, f); err != nil {
			// The scheduler refused a report: the turn fails as a local
			// one would; the runner is told to stop it. A store that
			// failed or stopped (a lost lead, a shutdown) cut the turn
			// instead: it goes on at the runner, for whoever resumes it.
			if ctx.Err() == nil && !store.Transient(err) && !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrClosed) {
				tr.tell(tr.sent, FrameCancel)
			}
			return true, agents.Outcome{}, err
		}
	case f.Type == FrameDone:
		// The end is acknowledged once the scheduler has recorded it
		// (Settled): until then the runner keeps it, and whoever resumes
		// the turn gets it again instead of running the turn twice. A
		// turn cut (interrupted) has no end to record: it starts again
		// when resumed, so the runner forgets it now.
		tr.seq = f.Seq
		out, err := f.outcome()
		if errors.Is(err, agents.ErrInterrupted) {
			tr.ack()
		}
		return true, out, err
	}
	tr.seq = max(tr.seq, f.Seq)
	if tr.seq-tr.acked >= AckEvery {
		tr.ack()
	}
	return false, out, nil
}

// outcome is the turn's end that done frame f carries.
func (f Frame) outcome() (agents.Outcome, error) {
	var out agents.Outcome
	if f.Outcome != nil {
		out = *f.Outcome
	}
	switch {
	case f.Interrupted:
		return out, fmt.Errorf("%s: %w", f.Error, agents.ErrInterrupted)
	case f.Error != "":
		return out, errors.New(f.Error)
	}
	return out, nil
}

// AckEvery is how many applied frames of a turn the bridge acknowledges
// at once (and its end): the runner keeps at most about as many.
const AckEvery = 16

// ack tells the runner that the frames through tr.seq are applied (the
// sink's reports, and their mark, are committed to the store when it
// returns; calls are kept by the runner until answered).
func (tr *turnRun) ack() {
	if tr.sent != nil && tr.sent.send(Frame{Type: FrameAck, Request: tr.t.RequestID, Number: tr.t.Number, Seq: tr.seq}) == nil {
		tr.acked = tr.seq
	}
}

func (tr *turnRun) event(ctx context.Context, f Frame) error {
	ev := f.Event
	if ev == nil {
		return nil
	}
	sink := tr.sink
	if tr.marks != nil {
		sink = tr.marks.Marking(f.Seq)
	}
	switch ev.Type {
	case agents.EventSession:
		tr.t.Session = ev.ID
		return sink.Session(ctx, ev.ID)
	case agents.EventTool:
		return sink.Tool(ctx, ev.Phase, ev.Name)
	case agents.EventProgress:
		return sink.Progress(ctx, ev.Percent, ev.Text)
	case agents.EventMessage:
		return sink.Message(ctx, ev.Text)
	}
	return nil
}

// call serves call frame f, once: a call being served is not served
// again, one answered gets its reply again (the runner resends a call
// until it has the reply, which may have been lost with a connection).
func (tr *turnRun) call(ctx context.Context, f Frame) {
	if f.Event == nil {
		return
	}
	reply, served := tr.calls[f.Event.ID]
	switch {
	case served && reply != nil:
		tr.pending = append(tr.pending, *reply)
		tr.flush(tr.sent)
		return
	case served:
		return
	}
	tr.calls[f.Event.ID] = nil
	ev := *f.Event
	go func() {
		resp := tr.sink.Call(ctx, ev)
		resp.ID = ev.ID
		select {
		case tr.replies <- Frame{Type: FrameReply, Request: tr.t.RequestID, Response: &resp}:
		case <-ctx.Done():
		}
	}()
}
