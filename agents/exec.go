package agents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Limits of the exec runtime.
const (
	// MaxLine bounds one line of agent output; longer is a protocol error.
	MaxLine = 1 << 20
	// stderrTail is how much of the agent's stderr a failure reason quotes.
	stderrTail = 2048
	// DefaultGrace is how long a stopping agent gets before each escalation
	// (cancel message → SIGINT → SIGTERM → SIGKILL).
	DefaultGrace = 5 * time.Second
)

// Exec runs an agent process per turn, speaking the JSON-lines exec protocol.
type Exec struct {
	Command []string
	Workdir string
	Env     []string
	// Grace is the time between stop escalations (default DefaultGrace).
	Grace time.Duration
}

// ErrProtocol: the agent broke the exec protocol.
var ErrProtocol = errors.New("agent protocol error")

// Run implements Runtime.
func (x *Exec) Run(ctx context.Context, t Turn, sink Sink) (Outcome, error) {
	if len(x.Command) == 0 {
		return Outcome{}, errors.New("exec: no command")
	}
	grace := x.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	cmd := exec.Command(x.Command[0], x.Command[1:]...)
	cmd.Dir = x.Workdir
	cmd.Env = append(os.Environ(), x.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return Outcome{}, fmt.Errorf("exec: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Outcome{}, fmt.Errorf("exec: %w", err)
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	if x.Workdir != "" {
		if err := os.MkdirAll(x.Workdir, 0o755); err != nil {
			return Outcome{}, fmt.Errorf("exec: workdir: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		return Outcome{}, fmt.Errorf("exec: start %s: %w", x.Command[0], err)
	}
	w := &stdinWriter{w: stdin}
	turn := TurnMessage{Type: "turn", RequestID: t.RequestID, Agent: t.Agent, Session: t.Session, Resumed: t.Resumed, Input: t.Input}
	if err := w.send(turn); err != nil {
		killGroup(cmd, syscall.SIGKILL)
		_ = cmd.Wait()
		return Outcome{}, fmt.Errorf("exec: write turn: %w", err)
	}

	events := make(chan Event)
	readErr := make(chan error, 1)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), MaxLine)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var ev Event
			if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
				readErr <- fmt.Errorf("%w: not a JSON event: %.120q", ErrProtocol, line)
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			events <- ev
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				err = fmt.Errorf("%w: an output line is over %d bytes", ErrProtocol, MaxLine)
			}
			readErr <- err
			_, _ = io.Copy(io.Discard, stdout)
		}
	}()

	var (
		out        Outcome
		ended      bool // final, yield or stopped seen
		failure    error
		inTool     int
		cancelSent bool
		cancelCh   = t.Cancel
		stopTimer  *time.Timer
		stopC      <-chan time.Time
		stopStage  int
	)
	stop := func() {
		// Escalate: SIGINT, SIGTERM, SIGKILL, one grace period apart.
		sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL}
		if stopStage < len(sigs) {
			killGroup(cmd, sigs[stopStage])
			stopStage++
		}
		if stopStage < len(sigs) {
			stopTimer = time.NewTimer(grace)
			stopC = stopTimer.C
		} else {
			stopC = nil
		}
	}
	sendCancel := func() {
		cancelSent = true
		_ = w.send(ControlMessage{Type: "cancel"})
		stopTimer = time.NewTimer(grace)
		stopC = stopTimer.C
	}
	ctxDone := ctx.Done()
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break loop
			}
			if ended {
				continue // anything after the end is ignored
			}
			switch ev.Type {
			case EventSession:
				failure = sink.Session(ctx, ev.ID)
			case EventTool:
				if ev.Phase == "start" {
					inTool++
				} else if inTool > 0 {
					inTool--
				}
				failure = sink.Tool(ctx, ev.Phase, ev.Name)
				if inTool == 0 && cancelCh == nil && !cancelSent && t.Cancel != nil {
					sendCancel() // the safe point after the tool that was running
				}
			case EventProgress:
				failure = sink.Progress(ctx, ev.Percent, ev.Text)
			case EventMessage:
				failure = sink.Message(ctx, ev.Text)
			case EventFinal:
				out.Final, ended = ev.Text, true
			case EventYield:
				out.Yielded, ended = true, true
			case EventStopped:
				out.Stopped, out.Final, ended = true, ev.Text, true
			case EventError:
				failure = fmt.Errorf("agent reported: %s", firstNonEmpty(ev.Message, ev.Reason, ev.Text))
			default:
				failure = fmt.Errorf("%w: unknown event type %q", ErrProtocol, ev.Type)
			}
			if failure != nil {
				killGroup(cmd, syscall.SIGKILL)
				break loop
			}
			if ended {
				_ = stdin.Close()
			}
		case <-cancelCh:
			cancelCh = nil
			if inTool == 0 {
				sendCancel()
			}
		case <-stopC:
			stop()
		case <-ctxDone:
			ctxDone = nil
			stop()
		}
	}
	// Drain the reader so Wait can finish, then wait.
	for range events {
	}
	if stopTimer != nil {
		stopTimer.Stop()
	}
	_ = stdin.Close()
	waitErr := cmd.Wait() // only after stdout is drained (exec.Cmd's rule)
	select {
	case err := <-readErr:
		if failure == nil && !ended {
			failure = err
		}
	default:
	}
	switch {
	case failure != nil:
		return Outcome{}, x.reason(failure, &stderr)
	case ended:
		return out, nil
	case ctx.Err() != nil:
		return Outcome{}, fmt.Errorf("turn interrupted: %w", ctx.Err())
	case cancelSent:
		return Outcome{Stopped: true}, nil
	case waitErr != nil:
		return Outcome{}, x.reason(fmt.Errorf("agent exited without a final answer: %v", waitErr), &stderr)
	default:
		return Outcome{}, x.reason(errors.New("agent exited without a final answer"), &stderr)
	}
}

func (x *Exec) reason(err error, stderr *tailBuffer) error {
	if tail := strings.TrimSpace(stderr.String()); tail != "" {
		return fmt.Errorf("%w (stderr: %s)", err, tail)
	}
	return err
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return "(no reason given)"
}

// killGroup signals the agent's whole process group.
func killGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

type stdinWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *stdinWriter) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.w.Write(append(b, '\n'))
	return err
}

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > stderrTail {
		b.buf = b.buf[len(b.buf)-stderrTail:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
