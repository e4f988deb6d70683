// Package demo is the built-in demo agent (`bridge demo-agent`): it speaks the
// exec protocol and acts out the directives in its ask, so that tests and the
// default configuration can exercise every path of a turn.
//
// Directives, separated by ";" or new lines:
//
//	echo TEXT        the final answer is TEXT
//	say TEXT         post TEXT to the thread
//	progress N [T]   report N% (and what it is doing)
//	tool NAME DUR    run a tool NAME for DUR (a safe point follows its end)
//	sleep DUR        wait DUR outside any tool
//	fail REASON      report an error and exit 1
//	exit N           exit with status N without a final answer
//	garbage          write a line that is not JSON
//	yield            end the turn waiting
//
// Anything else makes the final answer "echo: <ask>". If DEMO_AGENT_LOG names
// a file, every turn, session, tool start and end and cancel is appended to it.
package demo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
)

// Main runs one turn on stdin/stdout and returns the process exit code.
func Main(stdin io.Reader, stdout io.Writer) int {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		fmt.Fprintln(os.Stderr, "demo-agent: no turn on stdin")
		return 2
	}
	var turn agents.TurnMessage
	if err := json.Unmarshal(line, &turn); err != nil || turn.Type != "turn" {
		fmt.Fprintf(os.Stderr, "demo-agent: bad turn: %v\n", err)
		return 2
	}
	a := &agent{out: json.NewEncoder(stdout), raw: stdout, turn: turn, cancel: make(chan struct{})}
	a.logf("turn %s session=%q resumed=%v", turn.RequestID, turn.Session, turn.Resumed)
	go a.readControl(in)
	return a.run()
}

type agent struct {
	mu       sync.Mutex
	out      *json.Encoder
	raw      io.Writer
	turn     agents.TurnMessage
	cancel   chan struct{}
	once     sync.Once
	progress []string
}

func (a *agent) readControl(in *bufio.Reader) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var m agents.ControlMessage
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type == "cancel" {
			a.logf("cancel received %s", a.turn.RequestID)
			a.once.Do(func() { close(a.cancel) })
		}
	}
}

func (a *agent) emit(ev agents.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.out.Encode(ev)
}

func (a *agent) logf(format string, args ...any) {
	path := os.Getenv("DEMO_AGENT_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format("15:04:05.000000"), fmt.Sprintf(format, args...))
}

func (a *agent) cancelled() bool {
	select {
	case <-a.cancel:
		return true
	default:
		return false
	}
}

// stop answers a cancel at a safe point.
func (a *agent) stop() int {
	a.logf("stopped %s", a.turn.RequestID)
	a.emit(agents.Event{Type: agents.EventStopped, Text: strings.Join(a.progress, "; ")})
	return 0
}

func (a *agent) run() int {
	session := a.turn.Session
	if session == "" {
		session = fmt.Sprintf("demo-%s-%d", a.turn.RequestID, time.Now().UnixNano()%1e6)
		a.emit(agents.Event{Type: agents.EventSession, ID: session})
	} else {
		a.logf("resumed session %s for %s", session, a.turn.RequestID)
	}
	a.logf("session %s %s", a.turn.RequestID, session)
	var ask string
	var refs []string
	for _, in := range a.turn.Input {
		switch in.Kind {
		case agents.InputAsk:
			ask = in.Text
		case agents.InputReference:
			refs = append(refs, fmt.Sprintf("%s (%s): %s", in.RequestID, in.State, in.Text))
			a.logf("reference %s %s", in.RequestID, in.Text)
		}
	}
	final := ""
	directive := false
	for _, step := range strings.FieldsFunc(ask, func(r rune) bool { return r == ';' || r == '\n' }) {
		if a.cancelled() {
			return a.stop()
		}
		verb, arg, _ := strings.Cut(strings.TrimSpace(step), " ")
		arg = strings.TrimSpace(arg)
		switch verb {
		case "echo":
			final, directive = arg, true
		case "say":
			a.emit(agents.Event{Type: agents.EventMessage, Text: arg})
			a.progress = append(a.progress, "said "+arg)
			directive = true
		case "progress":
			n, text, _ := strings.Cut(arg, " ")
			p, _ := strconv.Atoi(n)
			a.emit(agents.Event{Type: agents.EventProgress, Percent: p, Text: text})
			directive = true
		case "tool":
			name, dur, _ := strings.Cut(arg, " ")
			d, _ := time.ParseDuration(strings.TrimSpace(dur))
			a.logf("tool start %s %s", a.turn.RequestID, name)
			a.emit(agents.Event{Type: agents.EventTool, Phase: "start", Name: name})
			time.Sleep(d) // the tool's work
			a.emit(agents.Event{Type: agents.EventTool, Phase: "end", Name: name})
			a.logf("tool end %s %s", a.turn.RequestID, name)
			a.progress = append(a.progress, "ran "+name)
			directive = true
		case "sleep":
			d, _ := time.ParseDuration(arg)
			select {
			case <-time.After(d):
			case <-a.cancel:
			}
			directive = true
		case "fail":
			a.emit(agents.Event{Type: agents.EventError, Message: arg})
			fmt.Fprintln(os.Stderr, "demo-agent: failing:", arg)
			return 1
		case "exit":
			n, _ := strconv.Atoi(arg)
			return n
		case "garbage":
			fmt.Fprintln(a.raw, "this is not json")
			directive = true
		case "yield":
			a.emit(agents.Event{Type: agents.EventYield, Reason: arg})
			return 0
		}
	}
	if a.cancelled() {
		return a.stop()
	}
	if !directive {
		final = "echo: " + ask
	}
	if len(refs) > 0 {
		final += "\nreferences: " + strings.Join(refs, "; ")
	}
	a.emit(agents.Event{Type: agents.EventFinal, Text: final})
	a.logf("final %s", a.turn.RequestID)
	return 0
}
