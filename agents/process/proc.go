package process

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/internal/procgroup"
	"github.com/roombridge/roombridge/requests"
)

// Limits of the agent runtimes.
const (
	// MaxLine bounds one line of agent output (default); a longer line is a
	// protocol error. The Claude Agent SDK uses the same bound.
	MaxLine = 1 << 20
	// stderrTail is how much of the agent's stderr a failure reason quotes.
	stderrTail = 2048
	// DefaultGrace is how long a stopping agent gets before each escalation
	// (cancel message → SIGINT → SIGTERM → SIGKILL), and how long it may take
	// to exit after its final answer. The Claude Agent SDK waits 5 s too.
	DefaultGrace = 5 * time.Second
)

// stopSignals is the escalation after a safe point, a timeout or shutdown,
// one grace period apart.
var stopSignals = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL}

// decoder turns an agent's stdout lines into protocol events. It is called
// from one goroutine; partial is called after the last decode.
type decoder interface {
	decode(line []byte) ([]agents.TurnEvent, error)
	// partial is what the agent said so far, for an incomplete result.
	partial() string
	// usage is what the turn cost, as the CLI reported it (zero: nothing).
	usage() requests.Usage
}

// process is one agent process serving one turn. The exec, claude and codex
// runtimes differ only in the command line, what goes to stdin and how
// stdout is read; starting, reading, cancelling at safe points, stopping and
// judging the end are this one piece of code.
type process struct {
	argv    []string
	dir     string
	env     []string
	hide    []string // names of the bridge's variables the agent must not see
	grace   time.Duration
	timeout time.Duration
	maxLine int
	// turn, when set, is written to stdin as the first line and stdin stays
	// open for the cancel message and responses to calls (exec protocol).
	// When nil, stdin is /dev/null and a cancel is SIGINT at the next safe
	// point (CLI agents).
	turn any
	dec  decoder
}

// item is one thing read from stdout: an event or a read error.
type item struct {
	ev  agents.TurnEvent
	err error
}

// run starts the process, serves the turn and returns its outcome.
func (p *process) run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	if len(p.argv) == 0 || p.argv[0] == "" {
		return agents.Outcome{}, errors.New("no command configured")
	}
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	if p.maxLine <= 0 {
		p.maxLine = MaxLine
	}
	if p.dir != "" {
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			return agents.Outcome{}, fmt.Errorf("workdir: %w", err)
		}
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.dir
	cmd.Env = append(Environ(os.Environ(), p.hide), p.env...)
	// Its own process group (stop signals reach its children too); SIGTERM
	// from the kernel if the bridge dies, so that a killed bridge leaves no
	// agent working unsupervised next to the resumed one.
	cmd.SysProcAttr = procgroup.Attr(syscall.SIGTERM)
	// A grandchild that keeps stderr open must not keep Wait from returning.
	cmd.WaitDelay = p.grace
	stderr := &procgroup.Tail{Max: stderrTail}
	cmd.Stderr = stderr
	// Our own pipe (not StdoutPipe) so that Wait may run while stdout is
	// still being read: an agent that exits while a grandchild holds stdout
	// open is noticed.
	outR, outW, err := os.Pipe()
	if err != nil {
		return agents.Outcome{}, fmt.Errorf("start %s: %w", p.argv[0], err)
	}
	cmd.Stdout = outW
	var stdin io.WriteCloser
	if p.turn != nil {
		if stdin, err = cmd.StdinPipe(); err != nil {
			outR.Close()
			outW.Close()
			return agents.Outcome{}, fmt.Errorf("start %s: %w", p.argv[0], err)
		}
	}
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		return agents.Outcome{}, fmt.Errorf("start %s: %w", p.argv[0], err)
	}
	outW.Close()
	d := &driver{p: p, cmd: cmd, sink: sink, stderr: stderr, stdout: outR}
	if stdin != nil {
		d.in = newStdinWriter(stdin)
		d.in.send(p.turn)
	}
	return d.loop(ctx, t, outR)
}

// driver is the state of one running turn.
type driver struct {
	p      *process
	cmd    *exec.Cmd
	sink   agents.Sink
	in     *stdinWriter // nil: no stdin protocol
	stderr *procgroup.Tail

	inTool     int
	cancelling bool
	draining   bool // shutdown: interrupt at the next safe point
	cancelAt   time.Time
	ended      bool
	out        agents.Outcome
	failure    error
	ran        []string       // tools that ended, in order
	usage      requests.Usage // reported by usage events

	stage  int // next of stopSignals to send
	timer  *time.Timer
	timerC <-chan time.Time
	// stdout is closed on our side when even SIGKILL did not end it (a
	// grandchild in another process group holds it): the turn never hangs.
	stdout    *os.File
	abandoned bool

	callCtx context.Context
	calls   sync.WaitGroup
	results chan agents.Response
}

// loop serves the turn until stdout has ended and the process has exited,
// then judges its outcome.
func (d *driver) loop(ctx context.Context, t agents.Turn, out *os.File) (agents.Outcome, error) {
	items := make(chan item)
	go d.read(out, items)
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()

	var stopCalls context.CancelFunc
	d.callCtx, stopCalls = context.WithCancel(ctx)
	d.results = make(chan agents.Response)
	var timeoutC <-chan time.Time
	if d.p.timeout > 0 {
		tm := time.NewTimer(d.p.timeout)
		defer tm.Stop()
		timeoutC = tm.C
	}
	waitErr := d.serve(ctx, t, items, exited, timeoutC)
	d.stopTimer()
	if d.in != nil {
		d.in.close()
	}
	stopCalls()
	d.calls.Wait()
	res, err := d.outcome(ctx, waitErr)
	res.Usage = d.usage.Add(d.p.dec.usage())
	if !res.Usage.IsZero() {
		res.Usage.Turns = 1
	}
	return res, err
}

// serve acts on what happens to the turn (events, the exit, a cancel, a
// drain, call responses, the stop timer, the timeout, ctx's end) until
// stdout has ended and the process has exited; it returns how it exited.
func (d *driver) serve(ctx context.Context, t agents.Turn, items <-chan item, exitedC <-chan error, timeoutC <-chan time.Time) error {
	cancelC := t.Cancel
	drainC := t.Drain
	ctxDone := ctx.Done()
	var waitErr error
	eof := false
	for !eof || exitedC != nil {
		select {
		case it, ok := <-items:
			switch {
			case !ok:
				eof, items = true, nil
			case it.err != nil:
				d.fail(it.err)
			default:
				d.handle(ctx, it.ev)
			}
		case waitErr = <-exitedC:
			// The agent is gone; whatever still holds its stdout gets one
			// grace period, then the stop signals.
			exitedC = nil
			if !eof {
				d.arm()
			}
		case <-cancelC:
			cancelC = nil
			d.cancel()
		case <-drainC:
			drainC = nil
			d.drain()
		case r := <-d.results:
			cancelC = d.respond(r, cancelC)
		case <-d.timerC:
			d.timerFired()
		case <-timeoutC:
			timeoutC = nil
			d.timedOut()
		case <-ctxDone:
			ctxDone = nil
			d.escalate()
		}
	}
	return waitErr
}

// respond passes a call's response to the agent, unless the turn has ended
// or failed. A cancel that is known goes first: the agent must not read an
// answer (say, an approval withdrawn by that cancel) as leave to go on. It
// returns cancelC, nil once that cancel is taken.
func (d *driver) respond(r agents.Response, cancelC <-chan struct{}) <-chan struct{} {
	select {
	case <-cancelC:
		cancelC = nil
		d.cancel()
	default:
	}
	if !d.ended && d.failure == nil && d.in != nil {
		d.in.send(r)
	}
	return cancelC
}

// timerFired sends the next stop signal or, when all were sent, abandons
// stdout.
func (d *driver) timerFired() {
	d.timer, d.timerC = nil, nil
	if d.stage < len(stopSignals) {
		d.escalate()
	} else {
		d.abandoned = true
		_ = d.stdout.Close()
	}
}

// timedOut fails the turn (unless it already ended) as over its timeout
// and starts stopping the agent.
func (d *driver) timedOut() {
	if !d.ended && d.failure == nil {
		d.failure = fmt.Errorf("turn timed out after %s", d.p.timeout)
	}
	d.escalate()
}

// outcome judges how the turn ended, once the process is gone.
func (d *driver) outcome(ctx context.Context, waitErr error) (agents.Outcome, error) {
	switch {
	case d.failure != nil:
		return agents.Outcome{}, d.reason(d.failure)
	case d.ended:
		return d.out, nil
	case ctx.Err() != nil:
		return agents.Outcome{}, fmt.Errorf("%w: %w", agents.ErrInterrupted, ctx.Err())
	case d.cancelling:
		return agents.Outcome{Stopped: true, Final: d.partial()}, nil
	case d.draining:
		return agents.Outcome{}, fmt.Errorf("%w: the bridge is shutting down", agents.ErrInterrupted)
	case d.judge() != nil:
		return agents.Outcome{}, d.reason(d.judge())
	case waitErr != nil:
		return agents.Outcome{}, d.reason(fmt.Errorf("agent exited without a final answer (%v)", waitErr))
	default:
		return agents.Outcome{}, d.reason(errors.New("agent exited without a final answer"))
	}
}

// read decodes stdout into items until EOF. After a bad line it reports the
// error and discards the rest, so the agent never blocks on a full pipe.
func (d *driver) read(r *os.File, items chan<- item) {
	defer close(items)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), d.p.maxLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		evs, err := d.p.dec.decode(line)
		if err != nil {
			items <- item{err: err}
			_, _ = io.Copy(io.Discard, r)
			return
		}
		for _, ev := range evs {
			items <- item{ev: ev}
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("%w: an output line is over %d bytes", agents.ErrProtocol, d.p.maxLine)
		}
		items <- item{err: err}
		_, _ = io.Copy(io.Discard, r)
	}
}

// handle acts on one event. Anything after the end of the turn (or a
// failure) is ignored.
func (d *driver) handle(ctx context.Context, ev agents.TurnEvent) {
	if d.ended || d.failure != nil {
		return
	}
	if err := d.dispatch(ctx, ev); err != nil {
		d.fail(err)
		return
	}
	if d.ended {
		// The answer is in; the agent gets one grace period to exit.
		if d.in != nil {
			d.in.close()
		}
		d.arm()
	}
}

// dispatch acts on one event by its type; an error fails the turn.
func (d *driver) dispatch(ctx context.Context, ev agents.TurnEvent) error {
	switch ev.Type {
	case agents.EventSession:
		if ev.ID == "" {
			return fmt.Errorf("%w: a session event without an id", agents.ErrProtocol)
		}
		return d.sink.Session(ctx, ev.ID)
	case agents.EventTool:
		return d.tool(ctx, ev)
	case agents.EventProgress:
		return d.sink.Progress(ctx, ev.Percent, ev.Text)
	case agents.EventMessage:
		return d.sink.Message(ctx, ev.Text)
	case evStatus:
		// Made by the CLI decoders only; no part of the exec protocol.
		if d.in != nil {
			return fmt.Errorf("%w: unknown event type %q", agents.ErrProtocol, ev.Type)
		}
		return d.status(ctx, ev.Text)
	case agents.EventUsage:
		if ev.Usage != nil {
			d.usage = d.usage.Add(*ev.Usage)
		}
	case agents.EventDelta, agents.EventThinking:
		// Shown live where the sink can; never stored one by one.
		if ls, ok := d.sink.(agents.LiveSink); ok && ev.Type == agents.EventDelta {
			ls.Delta(ctx, ev.Text)
		} else if ok {
			ls.Thinking(ctx, ev.Text)
		}
	case agents.EventAskAgent, agents.EventBackgroundRun, agents.EventRequestApproval, agents.EventTaskStatus, agents.EventAskUser:
		return d.call(ev)
	case agents.EventFinal, agents.EventYield, agents.EventStopped:
		d.end(ev)
	case agents.EventError:
		return fmt.Errorf("agent reported: %s", cmp.Or(ev.Message, ev.Reason, ev.Text, noReason))
	default:
		return fmt.Errorf("%w: unknown event type %q", agents.ErrProtocol, ev.Type)
	}
	return nil
}

// end records the turn's end: a final answer, a yield or a stop (whose
// answer, if none, is what the agent said so far).
func (d *driver) end(ev agents.TurnEvent) {
	switch ev.Type {
	case agents.EventFinal:
		d.out.Final, d.ended = ev.Text, true
	case agents.EventYield:
		d.out.Yielded, d.out.Reason, d.ended = true, ev.Reason, true
	case agents.EventStopped:
		d.out.Stopped, d.out.Final, d.ended = true, ev.Text, true
		if d.out.Final == "" {
			d.out.Final = d.partial()
		}
	}
}

// tool acts on a tool's start or end: it counts the tools running, tells
// the sink, and stops the agent at the safe point a cancel or a drain
// waits for (a new tool long after a cancel is interrupted).
func (d *driver) tool(ctx context.Context, ev agents.TurnEvent) error {
	switch ev.Phase {
	case agents.PhaseStart:
		if d.cancelling && d.stage == 0 {
			if time.Since(d.cancelAt) > d.p.grace {
				// A new tool long after the cancel: interrupt it.
				d.escalate()
			} else {
				// Started before the agent read the cancel: the end
				// of this tool is the safe point.
				d.stopTimer()
			}
		}
		d.inTool++
	case agents.PhaseEnd:
		if d.inTool > 0 {
			d.inTool--
		}
		d.ran = append(d.ran, ev.Name)
	default:
		return fmt.Errorf("%w: tool phase %q (want start or end)", agents.ErrProtocol, ev.Phase)
	}
	if err := d.sink.Tool(ctx, ev.Phase, ev.Name); err != nil {
		return err
	}
	if ev.Phase == agents.PhaseEnd && d.cancelling && d.inTool == 0 {
		d.safePoint()
	}
	if ev.Phase == agents.PhaseEnd && d.draining && d.inTool == 0 && d.stage == 0 {
		d.escalate() // the safe point a shutdown waited for
	}
	return nil
}

// call runs an agent's call in its own goroutine (an approval may wait for
// hours) and feeds the response back through the loop. Once the turn's
// context has ended (the turn is being cut: shutdown, lost leadership), an
// answer is no longer delivered, even if it came: the agent must not act on
// it in the moments before it is stopped (the resumed turn gets the same
// answer again from the call journal).
func (d *driver) call(ev agents.TurnEvent) error {
	if d.in == nil {
		return fmt.Errorf("%w: %s needs the exec protocol", agents.ErrProtocol, ev.Type)
	}
	if ev.ID == "" {
		return fmt.Errorf("%w: %s without an id", agents.ErrProtocol, ev.Type)
	}
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		r := d.sink.Call(d.callCtx, ev)
		if d.callCtx.Err() != nil {
			return
		}
		r.Type, r.ID = MsgResponse, ev.ID
		select {
		case d.results <- r:
		case <-d.callCtx.Done():
		}
	}()
	return nil
}

// cancel starts stopping the agent at its next safe point: an exec agent is
// told at once (and finishes the tool it runs); a CLI agent gets SIGINT when
// no tool runs.
func (d *driver) cancel() {
	if d.ended || d.failure != nil || d.cancelling {
		return
	}
	d.cancelling, d.cancelAt = true, time.Now()
	if d.in != nil {
		d.in.send(ControlMessage{Type: MsgCancel})
	}
	if d.inTool == 0 {
		d.safePoint()
	}
}

// drain interrupts the agent at its next safe point for a shutdown: now if
// no tool runs, else when the running tool ends (handle). The request stays
// running, to be resumed.
func (d *driver) drain() {
	if d.ended || d.failure != nil || d.draining {
		return
	}
	d.draining = true
	if d.inTool == 0 {
		d.escalate()
	}
}

// safePoint: no tool runs and a cancel is pending.
func (d *driver) safePoint() {
	if d.in != nil {
		d.arm() // the agent was told; it has one grace period to stop
		return
	}
	d.escalate()
}

// fail records the first failure and kills the agent.
func (d *driver) fail(err error) {
	if d.failure == nil && !d.ended {
		d.failure = err
	}
	d.stopTimer()
	_ = procgroup.Signal(d.cmd.Process, syscall.SIGKILL)
	d.stage = len(stopSignals)
	d.arm()
}

// escalate sends the next stop signal now and arms the one after it.
func (d *driver) escalate() {
	d.stopTimer()
	if d.stage < len(stopSignals) {
		_ = procgroup.Signal(d.cmd.Process, stopSignals[d.stage])
		d.stage++
	}
	d.arm()
}

// arm schedules the next stop signal one grace period from now (after
// SIGKILL: giving up on stdout), unless one is scheduled already.
func (d *driver) arm() {
	if d.timerC != nil || d.abandoned {
		return
	}
	d.timer = time.NewTimer(d.p.grace)
	d.timerC = d.timer.C
}

func (d *driver) stopTimer() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer, d.timerC = nil, nil
	}
}

// partial describes what an incomplete turn did: the tools it ran and what
// the agent last said.
func (d *driver) partial() string {
	var parts []string
	if len(d.ran) > 0 {
		parts = append(parts, "ran "+strings.Join(d.ran, ", "))
	}
	if s := d.p.dec.partial(); s != "" {
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func (d *driver) reason(err error) error {
	if tail := strings.TrimSpace(d.stderr.String()); tail != "" {
		return fmt.Errorf("%w (stderr: %s)", err, tail)
	}
	return err
}

// noReason is the reason of a failure that gave none.
const noReason = "(no reason given)"
