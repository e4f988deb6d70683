package runners

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/roombridge/roombridge/agents"
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

// turnRun is one Run's state.
type turnRun struct {
	h      *Hub
	t      agents.Turn
	sink   agents.Sink
	frames chan Frame
	seq    int    // the last frame applied
	acked  int    // the last frame acknowledged to the runner
	sent   *conn  // the connection the turn was last sent on
	runner string // the runner it was last sent to
	// interrupted: the runner went away past the grace during this turn.
	interrupted   bool
	cancel, drain <-chan struct{}
	replies       chan Frame
	// pending are replies to calls not yet sent (the runner was away).
	pending []Frame
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
	tr := &turnRun{h: r.Hub, t: t, sink: sink, frames: make(chan Frame, 64), cancel: t.Cancel, drain: t.Drain,
		replies: make(chan Frame, 8)}
	defer tr.leave()
	for {
		x, c, gone, change := tr.where(r.Agent)
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
			tr.pending = append(tr.pending, f)
			tr.flush(c)
		case <-change:
		case <-tr.cancel:
			tr.cancel = nil
			tr.tell(c, FrameCancel)
		case <-tr.drain:
			tr.drain = nil
			if c == nil {
				return agents.Outcome{}, fmt.Errorf("runner away: %w", agents.ErrInterrupted)
			}
			tr.tell(c, FrameDrain)
		case <-ctx.Done():
			return agents.Outcome{}, fmt.Errorf("%w: %w", agents.ErrInterrupted, ctx.Err())
		}
	}
}

// where finds the runner hosting agent and registers the turn with it.
func (tr *turnRun) where(agent string) (x *host, c *conn, gone bool, change <-chan struct{}) {
	h := tr.h
	h.mu.Lock()
	defer h.mu.Unlock()
	name := h.o.Hosts[agent]
	tr.runner = name
	x = h.hostLocked(name)
	x.turns[tr.t.RequestID] = tr.frames
	if x.c != nil && !slices.Contains(x.agents, agent) {
		return x, nil, x.gone, x.change
	}
	return x, x.c, x.gone, x.change
}

func (tr *turnRun) leave() {
	h := tr.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.host[tr.runner]; x != nil && x.turns[tr.t.RequestID] == tr.frames {
		delete(x.turns, tr.t.RequestID)
	}
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
		Input: tr.t.Input, MCPToken: tr.t.MCPToken, After: tr.seq, Adopt: live && first}
	if err := c.send(Frame{Type: FrameTurn, Request: tr.t.RequestID, Turn: w}); err != nil {
		h.o.Log.Warn("runner: sending a turn failed; waiting for the runner", "runner", x.name, "request_id", tr.t.RequestID, "error", err)
		tr.sent = nil
		return nil
	}
	tr.flush(c)
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
	if f.Seq <= tr.seq {
		return false, out, nil
	}
	tr.seq = f.Seq
	switch f.Type {
	case FrameEvent:
		err = tr.event(ctx, f)
	case FrameCall:
		ev := *f.Event
		go func() {
			resp := tr.sink.Call(ctx, ev)
			select {
			case tr.replies <- Frame{Type: FrameReply, Request: tr.t.RequestID, Response: &resp}:
			case <-ctx.Done():
			}
		}()
	case FrameDone:
		tr.ack()
		if f.Outcome != nil {
			out = *f.Outcome
		}
		switch {
		case f.Interrupted:
			return true, out, fmt.Errorf("%s: %w", f.Error, agents.ErrInterrupted)
		case f.Error != "":
			return true, out, errors.New(f.Error)
		}
		return true, out, nil
	}
	if err != nil {
		// The scheduler refused a report: the turn fails as a local one
		// would; the runner is told to stop it.
		tr.tell(tr.sent, FrameCancel)
		return true, agents.Outcome{}, err
	}
	if tr.seq-tr.acked >= AckEvery {
		tr.ack()
	}
	return false, out, nil
}

// AckEvery is how many applied frames of a turn the bridge acknowledges
// at once (and its end): the runner keeps at most about as many.
const AckEvery = 16

// ack tells the runner that the frames through tr.seq are applied (the
// sink's reports are committed to the store when it returns).
func (tr *turnRun) ack() {
	if tr.sent != nil && tr.sent.send(Frame{Type: FrameAck, Request: tr.t.RequestID, Seq: tr.seq}) == nil {
		tr.acked = tr.seq
	}
}

func (tr *turnRun) event(ctx context.Context, f Frame) error {
	ev := f.Event
	if ev == nil {
		return nil
	}
	switch ev.Type {
	case agents.EventSession:
		tr.t.Session = ev.ID
		return tr.sink.Session(ctx, ev.ID)
	case agents.EventTool:
		return tr.sink.Tool(ctx, ev.Phase, ev.Name)
	case agents.EventProgress:
		return tr.sink.Progress(ctx, ev.Percent, ev.Text)
	case agents.EventMessage:
		return tr.sink.Message(ctx, ev.Text)
	}
	return nil
}
