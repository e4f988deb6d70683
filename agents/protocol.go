package agents

import (
	"errors"

	"github.com/roombridge/roombridge/requests"
)

// The vocabulary that runtimes and the agent tools over MCP share with the
// scheduler: a turn's input, what an agent reports during a turn
// (TurnEvent) and the answers to its calls (Response). The exec protocol
// (package agents/process, docs/agent-protocol.md) carries them as JSON
// lines: Input in the turn message, TurnEvent lines on stdout, Response
// lines on stdin.

// ErrProtocol: the agent broke its protocol (its output, or a report the
// scheduler refuses).
var ErrProtocol = errors.New("agent protocol error")

// Input kinds of a turn.
const (
	// InputAsk is the request's ask.
	InputAsk = "ask"
	// InputReference is the result of a request the ask mentions.
	InputReference = "reference"
	// InputReply is a person's reply in the request's thread.
	InputReply = "reply"
	// InputTaskResult is the result of a background task the request started.
	InputTaskResult = "task_result"
	// InputAnswer is the final answer of a request the agent delegated to
	// (ask_agent).
	InputAnswer = "answer"
	// InputRecap recaps a request whose agent session was lost (see
	// ErrSessionLost): what the bridge recorded of it so far.
	InputRecap = "recap"
)

// Input is one item of a turn's input.
type Input struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	// RequestID is the request the item is about: the request itself (ask),
	// the referenced one (reference), the delegated one (answer).
	RequestID string `json:"request_id,omitempty"`
	// State is the state that request (or task) ended in.
	State string `json:"state,omitempty"`
	// From is who wrote a reply (surface:user).
	From string `json:"from,omitempty"`
	// TaskID names the background task of a task_result.
	TaskID string `json:"task_id,omitempty"`
}

// Response answers an agent's call (bridge → agent):
// {"type":"response","id":"c1","ok":true,...}.
type Response struct {
	// Type is "response" on the exec protocol's stdin (set by the runtime).
	Type string `json:"type"`
	// ID is the id of the call answered.
	ID string `json:"id"`
	// OK: the call succeeded (for request_approval: the action is
	// approved; for ask_user: a person answered).
	OK bool `json:"ok"`
	// Text is the answer as a person would read it ("approved by
	// slack:U1", "not approved: expired").
	Text string `json:"text,omitempty"`
	// Error says why a call failed.
	Error string `json:"error,omitempty"`
	// RequestID is the request ask_agent created.
	RequestID string `json:"request_id,omitempty"`
	// TaskID is the task background_run started (or task_status read).
	TaskID string `json:"task_id,omitempty"`
	// Task is the task task_status read.
	Task *TaskInfo `json:"task,omitempty"`
	// Approval is the approval request_approval opened (R…-07.1).
	Approval string `json:"approval,omitempty"`
	// Question is the question ask_user asked (R…-08.q1); Text is its
	// answer, From who answered (surface:user).
	Question string `json:"question,omitempty"`
	From     string `json:"from,omitempty"`
}

// TurnEvent types (agent → bridge).
const (
	EventSession         = "session"          // {"type":"session","id":"..."}
	EventTool            = "tool"             // {"type":"tool","phase":"start"|"end","name":"..."}
	EventProgress        = "progress"         // {"type":"progress","percent":60,"text":"..."}
	EventMessage         = "message"          // {"type":"message","text":"..."}
	EventDelta           = "delta"            // {"type":"delta","text":"a chunk of the answer being written"}
	EventThinking        = "thinking"         // {"type":"thinking","text":"what the agent is weighing"}
	EventUsage           = "usage"            // {"type":"usage","usage":{"input_tokens":12,"output_tokens":96,"cost_usd":0.02}}
	EventAskAgent        = "ask_agent"        // {"type":"ask_agent","id":"c1","agent":"reviewer","text":"..."}
	EventBackgroundRun   = "background_run"   // {"type":"background_run","id":"c2","name":"tests","command":["go","test","./..."]}
	EventRequestApproval = "request_approval" // {"type":"request_approval","id":"c3","action":"..."}
	EventTaskStatus      = "task_status"      // {"type":"task_status","id":"c4","task_id":"T-3"}
	EventAskUser         = "ask_user"         // {"type":"ask_user","id":"c5","text":"which region?"}
	EventFinal           = "final"            // {"type":"final","text":"..."}
	EventYield           = "yield"            // {"type":"yield","reason":"..."}
	EventStopped         = "stopped"          // {"type":"stopped","text":"done so far"} after a cancel
	EventError           = "error"            // {"type":"error","message":"..."}
)

// Tool phases.
const (
	PhaseStart = "start"
	PhaseEnd   = "end"
)

// TurnEvent is one thing an agent reports during a turn: a line of the exec
// protocol, a line of a CLI's output decoded (agents/process), or a call
// over MCP (delegation/mcptools). Which fields are set depends on Type.
type TurnEvent struct {
	Type string `json:"type"`
	// ID is the session ID (session) or the call's ID (ask_agent,
	// background_run, task_status, request_approval, ask_user), echoed in
	// the response.
	ID      string `json:"id,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Name    string `json:"name,omitempty"`
	Percent int    `json:"percent,omitempty"`
	Text    string `json:"text,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Agent is the agent ask_agent (or an agent background_run) asks.
	Agent string `json:"agent,omitempty"`
	// Command is the command background_run starts.
	Command []string `json:"command,omitempty"`
	// Action is what request_approval asks permission for.
	Action string `json:"action,omitempty"`
	// TaskID is the task task_status asks about.
	TaskID string `json:"task_id,omitempty"`
	// Usage is what the turn cost so far (usage; added up).
	Usage *requests.Usage `json:"usage,omitempty"`
}
