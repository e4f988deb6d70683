package agents

// Messages of the exec protocol (docs/agent-protocol.md has an example of
// each). The bridge writes one TurnMessage, then control messages (cancel)
// and responses to the agent's calls, to the agent's stdin, one JSON object
// per line; the agent writes Event lines to stdout.

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

// Bridge → agent message types.
const (
	// MsgTurn starts a turn (the first line on stdin).
	MsgTurn = "turn"
	// MsgCancel asks the agent to stop at its next safe point.
	MsgCancel = "cancel"
	// MsgResponse answers a call (ask_agent, background_run, task_status,
	// request_approval, ask_user) by its id.
	MsgResponse = "response"
)

// TurnMessage starts a turn (bridge → agent, first line on stdin).
type TurnMessage struct {
	Type      string `json:"type"` // "turn"
	RequestID string `json:"request_id"`
	Agent     string `json:"agent"`
	// Session is the session to continue ("" on a request's first turn).
	Session string `json:"session,omitempty"`
	// Resumed: the bridge restarted while this request ran; the turn
	// continues it.
	Resumed bool    `json:"resumed,omitempty"`
	Input   []Input `json:"input"`
}

// ControlMessage is a bridge → agent line without a payload:
// {"type":"cancel"}.
type ControlMessage struct {
	Type string `json:"type"`
}

// Response answers an agent's call (bridge → agent):
// {"type":"response","id":"c1","ok":true,...}.
type Response struct {
	Type string `json:"type"` // "response"
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

// Event types (agent → bridge).
const (
	EventSession         = "session"          // {"type":"session","id":"..."}
	EventTool            = "tool"             // {"type":"tool","phase":"start"|"end","name":"..."}
	EventProgress        = "progress"         // {"type":"progress","percent":60,"text":"..."}
	EventMessage         = "message"          // {"type":"message","text":"..."}
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

// Event is one line an agent writes. Which fields are set depends on Type.
type Event struct {
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
}

// The environment of an agent process whose turn has the agent tools over
// MCP (Turn.MCPURL, Turn.MCPToken): exec agents get both, codex gets both
// (it reads the token through bearer_token_env_var); claude gets the token
// in its MCP config file instead.
const (
	EnvMCPURL   = "ROOMBRIDGE_MCP_URL"
	EnvMCPToken = "ROOMBRIDGE_MCP_TOKEN"
)

// MCPServerName is the name of the bridge's MCP server in the CLIs' MCP
// configuration: Claude Code calls its tools mcp__roombridge__<tool>.
const MCPServerName = "roombridge"
