package agents

// Messages of the exec protocol (docs/agent-protocol.md). The bridge writes
// one TurnMessage, then control messages, to the agent's stdin; the agent
// writes Event lines to stdout.

// Input kinds of a turn.
const (
	InputAsk       = "ask"       // the request's ask
	InputReference = "reference" // the result of a request the ask mentions
	InputReply     = "reply"     // a person's reply in the thread
)

// Input is one item of a turn's input.
type Input struct {
	Kind      string `json:"kind"`
	Text      string `json:"text"`
	RequestID string `json:"request_id,omitempty"`
	State     string `json:"state,omitempty"`
}

// TurnMessage starts a turn (bridge → agent, first line on stdin).
type TurnMessage struct {
	Type      string  `json:"type"` // "turn"
	RequestID string  `json:"request_id"`
	Agent     string  `json:"agent"`
	Session   string  `json:"session,omitempty"`
	Resumed   bool    `json:"resumed,omitempty"`
	Input     []Input `json:"input"`
}

// ControlMessage is a later bridge → agent line: {"type":"cancel"}.
type ControlMessage struct {
	Type string `json:"type"`
}

// Event types (agent → bridge).
const (
	EventSession  = "session"  // {"type":"session","id":"..."}
	EventTool     = "tool"     // {"type":"tool","phase":"start"|"end","name":"..."}
	EventProgress = "progress" // {"type":"progress","percent":60,"text":"..."}
	EventMessage  = "message"  // {"type":"message","text":"..."}
	EventFinal    = "final"    // {"type":"final","text":"..."}
	EventYield    = "yield"    // {"type":"yield","reason":"..."}
	EventStopped  = "stopped"  // {"type":"stopped","text":"done so far"} after a cancel
	EventError    = "error"    // {"type":"error","message":"..."}
)

// Event is one line an agent writes.
type Event struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Name    string `json:"name,omitempty"`
	Percent int    `json:"percent,omitempty"`
	Text    string `json:"text,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}
