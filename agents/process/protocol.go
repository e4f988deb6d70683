package process

import "github.com/roombridge/roombridge/agents"

// Messages of the exec protocol (docs/agent-protocol.md has an example of
// each). The bridge writes one TurnMessage, then control messages (cancel)
// and responses to the agent's calls (agents.Response), to the agent's
// stdin, one JSON object per line; the agent writes agents.TurnEvent lines
// to stdout.

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
	Resumed bool           `json:"resumed,omitempty"`
	Input   []agents.Input `json:"input"`
}

// ControlMessage is a bridge → agent line without a payload:
// {"type":"cancel"}.
type ControlMessage struct {
	Type string `json:"type"`
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
