// Package agents runs agent turns: the turn-based Runtime interface (and
// the vocabulary runtimes share with the scheduler: Turn, Input, TurnEvent,
// Response), the scheduler that works through each agent's requests one at
// a time, in ID order, with different agents in parallel, cancels at safe
// points and resumes after a restart, the input pending for each request's
// next turn, and the journal of the agents' calls. The runtimes that run an
// agent as a process (exec, claude, codex) are package agents/process.
package agents

import (
	"context"
	"errors"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/requests"
)

// Turn is one turn of a request given to a runtime.
type Turn struct {
	RequestID string
	Agent     string
	// Session is the runtime's conversation to continue ("" for a new one).
	Session string
	// Resumed is set when the turn continues a request interrupted by a restart.
	Resumed bool
	// Number is the request's turn number: 1 for its first, one more for
	// each wake; a resumed turn keeps the number of the turn it repeats (0:
	// a request started by an earlier version, which has no turn record).
	Number int
	Input  []Input
	// Cancel is closed when the request is cancelled: the runtime stops the
	// agent at its next safe point (after the tool that runs ends).
	Cancel <-chan struct{}
	// Drain is closed when the bridge shuts down gracefully: the runtime
	// interrupts the agent at its next safe point (at once if no tool runs)
	// and returns an error wrapping ErrInterrupted; the request stays
	// running, to be resumed by the next start. Nil: never.
	Drain <-chan struct{}
	// MCPURL and MCPToken give the agent the bridge's agent tools over MCP
	// for this turn: the URL of the bridge's /mcp endpoint and a bearer
	// token bound to this request, revoked when the turn ends. Both are
	// empty when the scheduler has no ToolIssuer (or issuing failed). The
	// token is a secret: never put it in argv or a log.
	MCPURL   string
	MCPToken string
}

// ErrInterrupted: the turn was cut short by a shutdown (Turn.Drain, or the
// context ending); the request stays running, to be resumed.
var ErrInterrupted = errors.New("turn interrupted")

// Sink receives what the agent reports during a turn. Session, Tool,
// Progress and Message are called from the runtime's goroutine, in order;
// Call may run concurrently with them (an approval waits for a person while
// the turn goes on).
type Sink interface {
	// Session records the runtime's session reference.
	Session(ctx context.Context, id string) error
	// Tool reports a tool starting or ending (phase "start" or "end").
	Tool(ctx context.Context, phase, name string) error
	// Progress reports progress (0-100) and what the agent is doing.
	Progress(ctx context.Context, percent int, text string) error
	// Message posts text to the request's thread.
	Message(ctx context.Context, text string) error
	// Call carries out a call of the agent (ask_agent, background_run,
	// task_status, request_approval; see Scheduler.Call) and returns the
	// response to write back. It returns when ctx ends, at the latest.
	Call(ctx context.Context, ev TurnEvent) Response
}

// LiveSink is a Sink that shows a turn's work as it happens: the answer
// being written (Delta), what the agent thinks (Thinking). Runtimes call it
// from their goroutine, in order with the Sink's other reports. Nothing of
// it is durable: the answer is the final event, the text between tools a
// message. The scheduler's sink is one.
type LiveSink interface {
	Sink
	// Delta adds text to the answer being written.
	Delta(ctx context.Context, text string)
	// Thinking shows what the agent is weighing (the latest replaces the
	// one before).
	Thinking(ctx context.Context, text string)
}

// Live shows the turns' work in the requests' threads as it happens
// (threads.Live): it coalesces deltas in memory, per request, and sends
// them at each surface's pace. The scheduler's sink feeds it.
type Live interface {
	// Delta adds text to r's live answer.
	Delta(r *requests.Request, text string)
	// Thinking shows what r's agent is weighing.
	Thinking(r *requests.Request, text string)
	// Tool adds a step to r's tool timeline (phase start or end; failed
	// when the turn failed in it).
	Tool(r *requests.Request, phase, name string)
	// Said tells that r's agent posted the text written so far as a
	// message: the live answer starts anew.
	Said(r *requests.Request)
	// Ended tells that r's turn is over (its outcome recorded, or the turn
	// cut): what was live of it may be forgotten.
	Ended(r *requests.Request)
}

// Outcome is how a turn ended.
type Outcome struct {
	// Final is the answer, when the agent gave one.
	Final string
	// Yielded: the agent ended its turn waiting (on a delegation or task).
	Yielded bool
	// Reason is why the agent yielded.
	Reason string
	// Stopped: the agent stopped after a cancel; Final holds what was done.
	Stopped bool
	// YieldIfWaiting is set by runtimes whose agents cannot yield (claude,
	// codex: they call ask_agent and background_run over MCP and then end
	// their turn with an answer). Their final answer is a yield when the
	// request waits on what it started (an open rendezvous or background
	// task, or its result that arrived during the turn): the text is posted
	// in the thread and the request stays running. Otherwise it is the
	// answer.
	YieldIfWaiting bool
	// Usage is what the turn cost, as the agent reported it (zero: not
	// reported); it is set whether or not the turn failed.
	Usage requests.Usage
}

// Runtime runs one turn of an agent. A returned error means the turn failed;
// its text is the reason shown in the thread. When ctx ends (the bridge
// shuts down or loses leadership) the runtime stops the agent process and
// returns; the request stays running, to be resumed.
type Runtime interface {
	Run(ctx context.Context, t Turn, sink Sink) (Outcome, error)
}

// Settler is a Runtime told when the end of one of its turns is recorded
// (the request ended, failed or parked in the store): a runtime that runs
// turns elsewhere (a runner, package runners) lets go of a turn's end only
// then, so that a crash between the end's arrival and its record finds the
// end again instead of running the turn twice. The scheduler calls it
// after Run, once the outcome is committed; never for a turn cut before
// its end was recorded (a drain, a lost lead, a store failure).
type Settler interface {
	Settled(ctx context.Context, t Turn)
}

// Approver answers an agent's request_approval during a run: it asks the
// people of the request's room and blocks until they decide, the approval
// expires or is withdrawn, or ctx ends. *approvals.Service implements it.
type Approver interface {
	RequestApproval(ctx context.Context, requestID, action string) (approvals.Decision, error)
}

var _ Approver = (*approvals.Service)(nil)

// Questioner answers an agent's ask_user: it asks the people of the
// request's room a question (shown in the request's thread and its root's)
// and blocks until someone answers, it expires or is withdrawn, or ctx
// ends. The scheduler's Approver serves ask_user when it is a Questioner;
// *approvals.Service is.
type Questioner interface {
	AskUser(ctx context.Context, requestID, question string) (approvals.Decision, error)
}

var _ Questioner = (*approvals.Service)(nil)

// ToolIssuer issues the per-turn token of the agent tools over MCP: the
// scheduler issues one before each turn (Turn.MCPToken) and calls revoke as
// soon as the turn ends, however it ends. *mcptools.Server implements it.
type ToolIssuer interface {
	Issue(ctx context.Context, requestID requests.ID) (token string, revoke func(), err error)
}

// TaskInfo is what task_status tells an agent of a background task.
type TaskInfo struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	Output string `json:"output,omitempty"`
}

// TaskReader answers task_status: task taskID, if request from started it
// (a task of another request is unknown to it).
type TaskReader interface {
	TaskStatus(ctx context.Context, from requests.ID, taskID string) (TaskInfo, error)
}

// BackgroundRun is what an agent's background_run asks for: a command, or a
// run of another agent, that reports back to the request that started it.
type BackgroundRun struct {
	Name    string
	Command []string
	// Agent and Text: a delegated agent run instead of a command.
	Agent string
	Text  string
	// Key is the call's idempotency key (zero: none): a repeat of a call
	// already carried out gets its task, and no second one starts (see
	// CallKey).
	Key CallKey
}

// Delegator carries out delegation for the scheduler: ask_agent,
// background_run, and what a yield waits on (docs/design.md §3). Results come back
// through Deliver (an InputAnswer or InputTaskResult), which starts the
// waiting request's next turn. With no Delegator, calls are answered
// "delegation is not available" and a yield fails the request.
type Delegator interface {
	// AskAgent creates a request for agent on behalf of from and a
	// rendezvous from → it, and returns the new request's ID. key is the
	// call's idempotency key (zero: none): a repeat of a call already
	// carried out (ReplayCallTx) gets the request it created, and nothing
	// is created; a call carried out records its answer (RecordCallTx) in
	// the transaction that creates the request.
	AskAgent(ctx context.Context, from requests.ID, agent, text string, key CallKey) (requests.ID, error)
	// BackgroundRun starts a task for request from and returns its ID; a
	// repeat of a call (run.Key) gets the task it started, as for
	// AskAgent.
	BackgroundRun(ctx context.Context, from requests.ID, run BackgroundRun) (string, error)
	// Waiting reports whether request id, whose turn just yielded, has an
	// open rendezvous or task whose result will wake it.
	Waiting(ctx context.Context, id requests.ID) (bool, error)
}
