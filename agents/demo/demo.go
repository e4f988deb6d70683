// Package demo is the built-in demo agent (`bridge demo-agent`): it speaks the
// exec protocol and acts out the directives in its ask, so that tests and the
// default configuration can exercise every path of a turn.
//
// Directives, separated by ";" or new lines:
//
//	echo TEXT          the final answer is TEXT
//	say TEXT           post TEXT to the thread
//	stream DUR TEXT    write TEXT as deltas (a word each) spread over DUR; TEXT
//	                   is the final answer unless a later echo gives another
//	progress N [T]     report N% (and what it is doing)
//	tool NAME DUR      run a tool NAME for DUR (a safe point follows its end);
//	                   DUR may instead be a file path: the tool runs until it exists
//	sleep DUR          wait DUR outside any tool (a cancel ends the wait)
//	approve ACTION     ask permission for ACTION (request_approval), say the answer
//	question TEXT      ask a person TEXT (ask_user), say "answer: <the answer>"
//	                   (or why there is none); that is the final answer unless
//	                   a later echo gives another
//	ask AGENT TEXT     ask another agent (ask_agent; "|" in TEXT stands for ";");
//	                   on success, yield waiting on it
//	background NAME CMD...  start a background command (background_run)
//	yield [REASON]     end the turn waiting
//	fail REASON        report an error and exit 1
//	exit N             exit with status N without a final answer
//	garbage            write a line that is not JSON
//	big N              write one line of N bytes
//	long N             the final answer is N bytes ("x" repeated)
//	linger DUR         after the final answer, stay alive DUR
//	trap               ignore SIGINT and SIGTERM from now on
//	touch PATH         create the file PATH
//	await PATH         wait (up to 30 s) until the file PATH exists
//
// Anything else makes the final answer "echo: <ask>". A turn without an ask
// (the turn after a yield) answers with a summary of its input. If
// DEMO_AGENT_LOG names a file, every turn, session, input, tool start and
// end, call, cancel, stop and final is appended to it, one line each.
package demo

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/internal/clip"
)

// awaitLimit bounds an await directive, so a broken test never leaves an
// agent behind forever.
const awaitLimit = 30 * time.Second

// Main runs one turn on stdin/stdout and returns the process exit code.
func Main(stdin io.Reader, stdout io.Writer) int {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		fmt.Fprintln(os.Stderr, "demo-agent: no turn on stdin")
		return 2
	}
	var turn process.TurnMessage
	if err := json.Unmarshal(line, &turn); err != nil || turn.Type != process.MsgTurn {
		fmt.Fprintf(os.Stderr, "demo-agent: bad turn: %v\n", err)
		return 2
	}
	a := &agent{out: json.NewEncoder(stdout), raw: stdout, turn: turn, cancel: make(chan struct{}), eof: make(chan struct{}),
		waiting: map[string]chan agents.Response{}}
	a.logf("turn %s session=%q resumed=%v inputs=%d pid=%d", turn.RequestID, turn.Session, turn.Resumed, len(turn.Input), os.Getpid())
	go a.readControl(in)
	return a.run()
}

type agent struct {
	mu      sync.Mutex
	out     *json.Encoder
	raw     io.Writer
	turn    process.TurnMessage
	cancel  chan struct{}
	eof     chan struct{} // stdin ended: no response will come
	once    sync.Once
	done    []string
	calls   int
	waiting map[string]chan agents.Response
}

// readControl reads the bridge's later messages: cancel and responses.
func (a *agent) readControl(in *bufio.Reader) {
	defer close(a.eof)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var m agents.Response
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch m.Type {
		case process.MsgCancel:
			a.logf("cancel received %s", a.turn.RequestID)
			a.once.Do(func() { close(a.cancel) })
		case process.MsgResponse:
			a.mu.Lock()
			ch := a.waiting[m.ID]
			delete(a.waiting, m.ID)
			a.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

func (a *agent) emit(ev agents.TurnEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.out.Encode(ev)
}

// call emits a call and waits for its response (or a cancel). Calls are
// numbered c1, c2, … in the order the turn makes them: a resumed turn acts
// out the same ask again and so repeats the cut turn's calls with the same
// ids, which the bridge answers as the first time (a call id is stable
// across a resumed turn: docs/agent-protocol.md §1.5).
func (a *agent) call(ev agents.TurnEvent) (agents.Response, bool) {
	ch := make(chan agents.Response, 1)
	a.mu.Lock()
	a.calls++
	ev.ID = fmt.Sprintf("c%d", a.calls)
	a.waiting[ev.ID] = ch
	a.mu.Unlock()
	a.logf("call %s %s %s", a.turn.RequestID, ev.Type, ev.ID)
	a.emit(ev)
	select {
	case r := <-ch:
		a.logf("response %s %s ok=%v %s%s%s%s", a.turn.RequestID, ev.ID, r.OK, r.Text, r.Error, r.RequestID, r.TaskID)
		return r, true
	case <-a.cancel:
		return agents.Response{}, false
	case <-a.eof:
		return agents.Response{Error: "stdin ended before the response"}, true
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
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

// await waits until the file path exists (at most awaitLimit) and logs
// whether it did.
func (a *agent) await(path string) {
	deadline := time.Now().Add(awaitLimit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			a.logf("await %s found %s", a.turn.RequestID, path)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.logf("await %s timeout %s", a.turn.RequestID, path)
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
	a.emit(agents.TurnEvent{Type: agents.EventStopped, Text: strings.Join(a.done, "; ")})
	return 0
}

// inputs is what a turn's input says: its ask (if any), the requests it
// references, and every other input, each as one line.
type inputs struct {
	ask    string
	hasAsk bool
	refs   []string
	other  []string
}

// script is what a turn's directives build up: the final answer, whether
// any directive was known, and how long to stay alive after the final.
type script struct {
	final     string
	directive bool
	linger    time.Duration
}

// run acts out the turn and returns the process exit code.
func (a *agent) run() int {
	a.startSession()
	in := a.readInputs()
	if !in.hasAsk {
		a.emit(agents.TurnEvent{Type: agents.EventFinal, Text: "got " + strings.Join(in.other, "; ")})
		a.logf("final %s", a.turn.RequestID)
		return 0
	}
	var s script
	for _, step := range strings.FieldsFunc(in.ask, func(r rune) bool { return r == ';' || r == '\n' }) {
		if a.cancelled() {
			return a.stop()
		}
		verb, arg, _ := strings.Cut(strings.TrimSpace(step), " ")
		arg = strings.TrimSpace(arg)
		known, end, code := a.act(&s, verb, arg)
		if end {
			return code
		}
		s.directive = s.directive || known
	}
	return a.finish(s, in)
}

// startSession announces a new session, or logs the resumed one.
func (a *agent) startSession() {
	session := a.turn.Session
	if session == "" {
		session = fmt.Sprintf("demo-%s-%d", a.turn.RequestID, time.Now().UnixNano()%1e6)
		a.emit(agents.TurnEvent{Type: agents.EventSession, ID: session})
	} else {
		a.logf("resumed session %s for %s", session, a.turn.RequestID)
	}
	a.logf("session %s %s", a.turn.RequestID, session)
}

// readInputs sorts the turn's input into its ask, references and the rest,
// logging each reference and other input.
func (a *agent) readInputs() inputs {
	var r inputs
	for _, in := range a.turn.Input {
		switch in.Kind {
		case agents.InputAsk:
			r.ask, r.hasAsk = in.Text, true
		case agents.InputReference:
			r.refs = append(r.refs, fmt.Sprintf("%s (%s): %s", in.RequestID, in.State, in.Text))
			a.logf("reference %s %s", in.RequestID, in.Text)
		default:
			s := strings.Join(slices.DeleteFunc([]string{in.Kind, in.From, in.RequestID, in.TaskID},
				func(s string) bool { return s == "" }), " ") + ": " + in.Text
			r.other = append(r.other, s)
			a.logf("input %s %s", a.turn.RequestID, s)
		}
	}
	return r
}

// finish ends a turn whose directives all ran: it stops on a cancel, or
// emits the final answer (and lingers if asked to).
func (a *agent) finish(s script, in inputs) int {
	if a.cancelled() {
		return a.stop()
	}
	final := s.final
	if final == "" && !s.directive {
		final = "echo: " + in.ask
	}
	if len(in.refs) > 0 {
		final += "\nreferences: " + strings.Join(in.refs, "; ")
	}
	a.emit(agents.TurnEvent{Type: agents.EventFinal, Text: final})
	a.logf("final %s", a.turn.RequestID)
	if s.linger > 0 {
		time.Sleep(s.linger)
	}
	return 0
}

// act runs one directive: it reports whether the verb is known and, if the
// turn ends here, that it does and with which exit code.
func (a *agent) act(s *script, verb, arg string) (known, end bool, code int) {
	if known, end, code = a.actCall(s, verb, arg); known {
		return known, end, code
	}
	if known, end, code = a.actEnd(verb, arg); known {
		return known, end, code
	}
	return a.actLocal(s, verb, arg), false, 0
}

// actLocal runs a directive that neither calls the bridge nor ends the turn,
// and reports whether the verb is known.
func (a *agent) actLocal(s *script, verb, arg string) bool {
	switch verb {
	case "echo":
		s.final = arg
	case "stream":
		s.final = a.stream(arg)
	case "say":
		a.emit(agents.TurnEvent{Type: agents.EventMessage, Text: arg})
		a.done = append(a.done, "said "+arg)
	case "progress":
		n, text, _ := strings.Cut(arg, " ")
		p, _ := strconv.Atoi(n)
		a.emit(agents.TurnEvent{Type: agents.EventProgress, Percent: p, Text: text})
	case "tool":
		a.tool(arg)
	case "sleep":
		d, _ := time.ParseDuration(arg)
		select {
		case <-time.After(d):
		case <-a.cancel:
		}
	case "garbage":
		fmt.Fprintln(a.raw, "this is not json")
	case "big":
		n, _ := strconv.Atoi(arg)
		a.mu.Lock()
		fmt.Fprintf(a.raw, "{\"type\":\"message\",\"text\":\"%s\"}\n", strings.Repeat("x", max(n-30, 0)))
		a.mu.Unlock()
	case "long":
		n, _ := strconv.Atoi(arg)
		s.final = strings.Repeat("x", max(n, 0))
	case "linger":
		s.linger, _ = time.ParseDuration(arg)
	case "trap":
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
		a.logf("trapping signals %s", a.turn.RequestID)
	case "touch":
		_ = os.WriteFile(arg, nil, 0o644)
	case "await":
		a.await(arg)
	default:
		return false
	}
	return true
}

// actEnd runs a directive that ends the turn (yield, fail, exit): it
// reports whether the verb is one of them and the exit code.
func (a *agent) actEnd(verb, arg string) (known, end bool, code int) {
	switch verb {
	case "yield":
		a.emit(agents.TurnEvent{Type: agents.EventYield, Reason: arg})
		a.logf("yield %s", a.turn.RequestID)
		return true, true, 0
	case "fail":
		// stderr first: the bridge stops the agent as soon as it reads the error.
		fmt.Fprintln(os.Stderr, "demo-agent: failing:", arg)
		a.emit(agents.TurnEvent{Type: agents.EventError, Message: arg})
		return true, true, 1
	case "exit":
		n, _ := strconv.Atoi(arg)
		fmt.Fprintf(os.Stderr, "demo-agent: exiting with status %d\n", n)
		return true, true, n
	}
	return false, false, 0
}

// actCall runs a directive that calls the bridge (approve, question, ask,
// background): it reports whether the verb is one of them and, if the
// turn ends here (a cancel, or an ask that yields), the exit code.
func (a *agent) actCall(s *script, verb, arg string) (known, end bool, code int) {
	var ok bool
	switch verb {
	case "approve":
		ok = a.approve(arg)
	case "question":
		ok = a.question(s, arg)
	case "ask":
		var yielded bool
		if yielded, ok = a.askAgent(arg); ok && yielded {
			return true, true, 0
		}
	case "background":
		ok = a.background(arg)
	default:
		return false, false, 0
	}
	if !ok {
		return true, true, a.stop()
	}
	return true, false, 0
}

// tool runs "NAME DUR" as a tool: a start event, the work (a duration, or
// until a file exists; a cancel does not cut it), then the end event.
func (a *agent) tool(arg string) {
	name, dur, _ := strings.Cut(arg, " ")
	dur = strings.TrimSpace(dur)
	a.logf("tool start %s %s", a.turn.RequestID, name)
	a.emit(agents.TurnEvent{Type: agents.EventTool, Phase: agents.PhaseStart, Name: name})
	if d, err := time.ParseDuration(dur); err == nil {
		time.Sleep(d)
	} else {
		a.await(dur)
	}
	// Logged first: the tool's end is the bridge's safe point, where
	// a drain may stop this process as soon as it hears of it.
	a.logf("tool end %s %s", a.turn.RequestID, name)
	a.emit(agents.TurnEvent{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: name})
	a.done = append(a.done, "ran "+name)
}

// approve asks permission for action and says the answer; false on a cancel.
func (a *agent) approve(action string) bool {
	r, ok := a.call(agents.TurnEvent{Type: agents.EventRequestApproval, Action: action})
	if !ok {
		return false
	}
	answer := r.Text
	if answer == "" {
		answer = "not approved: " + r.Error
	}
	a.emit(agents.TurnEvent{Type: agents.EventMessage, Text: "approval: " + answer})
	a.done = append(a.done, "asked to "+action+": "+answer)
	return true
}

// question asks a person text and says (and makes final) the answer; false
// on a cancel.
func (a *agent) question(s *script, text string) bool {
	r, ok := a.call(agents.TurnEvent{Type: agents.EventAskUser, Text: text})
	if !ok {
		return false
	}
	s.final = "answer: " + firstNonEmpty(r.Text, "no answer: "+r.Error)
	a.emit(agents.TurnEvent{Type: agents.EventMessage, Text: s.final})
	a.done = append(a.done, "asked "+text+": "+s.final)
	return true
}

// askAgent asks "AGENT TEXT" of another agent and, on success, yields
// waiting on it (yielded); ok is false on a cancel.
func (a *agent) askAgent(arg string) (yielded, ok bool) {
	who, text, _ := strings.Cut(arg, " ")
	text = strings.ReplaceAll(text, "|", ";")
	r, ok := a.call(agents.TurnEvent{Type: agents.EventAskAgent, Agent: who, Text: text})
	if !ok {
		return false, false
	}
	if r.OK {
		a.emit(agents.TurnEvent{Type: agents.EventYield, Reason: "waiting on " + r.RequestID})
		a.logf("yield %s", a.turn.RequestID)
		return true, true
	}
	a.emit(agents.TurnEvent{Type: agents.EventMessage, Text: "ask_agent failed: " + r.Error})
	return false, true
}

// background starts "NAME CMD..." as a background command and says how
// that went; false on a cancel.
func (a *agent) background(arg string) bool {
	name, cmd, _ := strings.Cut(arg, " ")
	r, ok := a.call(agents.TurnEvent{Type: agents.EventBackgroundRun, Name: name, Command: strings.Fields(cmd)})
	if !ok {
		return false
	}
	if r.OK {
		a.emit(agents.TurnEvent{Type: agents.EventMessage, Text: "started task " + r.TaskID})
	} else {
		a.emit(agents.TurnEvent{Type: agents.EventMessage, Text: "background_run failed: " + r.Error})
	}
	return true
}

// stream writes "DUR TEXT"'s TEXT as delta events, a word (and the space
// before it) each, spread evenly over DUR, and returns TEXT. A cancel ends
// the wait between words (the rest is written at once).
func (a *agent) stream(arg string) string {
	dur, text, _ := strings.Cut(arg, " ")
	d, _ := time.ParseDuration(dur)
	var words []string
	for i, w := range strings.SplitAfter(text, " ") {
		if w != "" || i == 0 {
			words = append(words, w)
		}
	}
	gap := d / time.Duration(max(len(words), 1))
	for _, w := range words {
		a.emit(agents.TurnEvent{Type: agents.EventDelta, Text: w})
		if gap > 0 && !a.cancelled() {
			select {
			case <-time.After(gap):
			case <-a.cancel:
			}
		}
	}
	a.done = append(a.done, "streamed "+clip.Line(text, 40, clip.Runes))
	return text
}
