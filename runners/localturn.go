package runners

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
)

// localTurn is a turn running on the runner. Its frames are kept until the
// bridge acknowledges them (a cumulative ack every AckEvery frames it
// applied, and at the end), so a reconnect can resend what the bridge
// missed and the buffer stays small however long the turn talks.
type localTurn struct {
	r      *Runner
	req    string
	number int // the scheduler's number of the turn (Turn.Number)
	// out orders the sends of the turn's frames: a re-attach's resend and
	// new frames go out in sequence.
	out sync.Mutex

	mu     sync.Mutex
	seq    int
	frames []Frame
	// on is the connection the bridge last gave (or re-attached) the turn
	// on: frames go out only on it, so none overtakes a resend.
	on      *rconn
	onCh    chan struct{} // closed, and replaced, when on changes (awaitAttached)
	ended   bool
	token   string // the bridge's tool token of the turn
	local   string // the agent's token at the runner's MCP endpoint
	replies map[string]chan agents.Response
	cancel  chan struct{}
	drain   chan struct{}
	cOnce   sync.Once
	dOnce   sync.Once
}

// start runs a new turn t as a local process.
func (r *Runner) start(ctx context.Context, c *rconn, t Turn) {
	rt := r.o.Agents[t.Agent]
	lt := &localTurn{r: r, req: t.RequestID, number: t.Number, seq: t.After, on: c, token: t.MCPToken, replies: map[string]chan agents.Response{},
		cancel: make(chan struct{}), drain: make(chan struct{})}
	r.mu.Lock()
	r.turns[t.RequestID] = lt
	r.mu.Unlock()
	if rt == nil {
		lt.emit(Frame{Type: FrameDone, Error: "runner " + r.o.Name + " does not host agent " + t.Agent})
		return
	}
	turn := agents.Turn{RequestID: t.RequestID, Agent: t.Agent, Session: t.Session, Resumed: t.Resumed, Input: t.Input,
		Cancel: lt.cancel, Drain: lt.drain}
	if t.MCPToken != "" {
		turn.MCPURL, turn.MCPToken = r.mcp.url, r.mcp.issue(lt)
		lt.local = turn.MCPToken
	}
	r.o.Log.Info("runner: turn starting", "request_id", t.RequestID, "agent", t.Agent, "turn", t.Number, "resumed", t.Resumed)
	go func() {
		out, err := rt.Run(ctx, turn, &localSink{lt: lt})
		r.mcp.revoke(lt.local)
		f := Frame{Type: FrameDone, Outcome: &out}
		if err != nil {
			f.Error = err.Error()
			f.Interrupted = errors.Is(err, agents.ErrInterrupted)
		}
		lt.emit(f)
		r.o.Log.Info("runner: turn ended", "request_id", t.RequestID, "agent", t.Agent, "error", f.Error)
	}()
}

// emit numbers f, keeps it and sends it when the turn's connection is the
// current one.
func (lt *localTurn) emit(f Frame) {
	lt.out.Lock()
	defer lt.out.Unlock()
	lt.mu.Lock()
	lt.seq++
	f.Seq, f.Request = lt.seq, lt.req
	lt.frames = append(lt.frames, f)
	if f.Type == FrameDone {
		lt.ended = true
	}
	on := lt.on
	lt.mu.Unlock()
	if on != nil && on == lt.r.current() {
		_ = on.send(f) // a frame lost with the connection is resent on the next
	}
}

// acked forgets the frames through seq, which the bridge has applied,
// but for calls not answered yet (a new leader must see them again).
// forget: the turn has ended and its end is applied (seq 0: an end ack
// without a sequence number).
func (lt *localTurn) acked(seq int) (forget bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended && (seq == 0 || seq >= lt.seq) {
		lt.frames = nil
		return true
	}
	lt.frames = slices.DeleteFunc(lt.frames, func(f Frame) bool {
		return f.Seq <= seq && (f.Type != FrameCall || lt.replies[f.Event.ID] == nil)
	})
	return false
}

// abandon lets go of a turn that no turn of the bridge's holds any more
// (why: replaced by another of its request, or its request has ended):
// its frames no longer go out (the bridge would take them for another
// turn's), and if it still runs it is stopped.
func (lt *localTurn) abandon(why string) {
	lt.mu.Lock()
	lt.setOnLocked(nil)
	ended := lt.ended
	lt.mu.Unlock()
	if !ended {
		lt.r.o.Log.Warn("runner: a turn "+why+"; stopping it", "request_id", lt.req, "turn", lt.number)
		lt.cOnce.Do(func() { close(lt.cancel) })
	}
}

// buffered is how many frames the turn keeps.
func (lt *localTurn) buffered() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.frames)
}

// reattach resends on c the frames after t.After, the last the bridge's
// store has applied (the bridge is back, or a new leader adopts the
// turn), and the calls not answered yet; the turn's new frames go out on c
// after them.
func (lt *localTurn) reattach(c *rconn, t Turn) {
	lt.out.Lock()
	defer lt.out.Unlock()
	lt.mu.Lock()
	if t.MCPToken != "" {
		lt.token = t.MCPToken
	}
	lt.setOnLocked(c)
	var resend []Frame
	for _, f := range lt.frames {
		if f.Seq > t.After || f.Type == FrameCall && lt.replies[f.Event.ID] != nil {
			resend = append(resend, f)
		}
	}
	lt.mu.Unlock()
	lt.r.o.Log.Info("runner: turn re-attached", "request_id", lt.req, "resent", len(resend))
	for _, f := range resend {
		if c.send(f) != nil {
			return
		}
	}
}

// control carries out a cancel, a drain or a call's reply.
func (lt *localTurn) control(f Frame) {
	switch f.Type {
	case FrameCancel:
		lt.cOnce.Do(func() { close(lt.cancel) })
	case FrameDrain:
		lt.dOnce.Do(func() { close(lt.drain) })
	case FrameReply:
		if f.Response == nil {
			return
		}
		lt.mu.Lock()
		ch := lt.replies[f.Response.ID]
		delete(lt.replies, f.Response.ID)
		lt.mu.Unlock()
		if ch != nil {
			ch <- *f.Response
		}
	}
}

// setOnLocked makes c the turn's connection and wakes awaitAttached.
// lt.mu is held.
func (lt *localTurn) setOnLocked(c *rconn) {
	lt.on = c
	if lt.onCh != nil {
		close(lt.onCh)
		lt.onCh = nil
	}
}

// awaitAttached returns the connection the turn is attached on, with the
// turn's tool token the bridge gave on it, once that connection is the
// runner's current one (a runner that reconnected is attached again only
// when the bridge re-sends the turn, with the token of the bridge's turn:
// an earlier leader's may be revoked). With old (the connection a call
// just failed on) it waits for another, and takes old again only once
// patience has passed with no change (the call broke, the stream did
// not). The MCP proxy's sends use it; it returns when ctx ends.
func (lt *localTurn) awaitAttached(ctx context.Context, old *rconn, patience time.Duration) (*rconn, string, error) {
	t := time.NewTimer(patience)
	defer t.Stop()
	late := old == nil
	for {
		cur, curCh := lt.r.currentAndChange()
		lt.mu.Lock()
		c, tok := lt.on, lt.token
		if lt.onCh == nil {
			lt.onCh = make(chan struct{})
		}
		onCh := lt.onCh
		lt.mu.Unlock()
		if c != nil && c == cur && (c != old || late) {
			return c, tok, nil
		}
		select {
		case <-onCh:
		case <-curCh:
		case <-t.C:
			late = true
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

// localSink is the agents.Sink of a turn on the runner: every report
// becomes a frame to the bridge.
type localSink struct{ lt *localTurn }

func (s *localSink) Session(_ context.Context, id string) error {
	s.lt.emit(Frame{Type: FrameEvent, Event: &agents.TurnEvent{Type: agents.EventSession, ID: id}})
	return nil
}

func (s *localSink) Tool(_ context.Context, phase, name string) error {
	s.lt.emit(Frame{Type: FrameEvent, Event: &agents.TurnEvent{Type: agents.EventTool, Phase: phase, Name: name}})
	return nil
}

func (s *localSink) Progress(_ context.Context, percent int, text string) error {
	s.lt.emit(Frame{Type: FrameEvent, Event: &agents.TurnEvent{Type: agents.EventProgress, Percent: percent, Text: text}})
	return nil
}

func (s *localSink) Message(_ context.Context, text string) error {
	s.lt.emit(Frame{Type: FrameEvent, Event: &agents.TurnEvent{Type: agents.EventMessage, Text: text}})
	return nil
}

// Call sends the call to the bridge and waits for its reply.
func (s *localSink) Call(ctx context.Context, ev agents.TurnEvent) agents.Response {
	ch := make(chan agents.Response, 1)
	s.lt.mu.Lock()
	s.lt.replies[ev.ID] = ch
	s.lt.mu.Unlock()
	s.lt.emit(Frame{Type: FrameCall, Event: &ev})
	select {
	case resp := <-ch:
		return resp
	case <-ctx.Done():
		return agents.Response{ID: ev.ID, Error: "the turn ended"}
	}
}
