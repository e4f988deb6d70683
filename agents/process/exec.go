package process

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/requests"
)

// execLaunch starts an Exec agent: Command as it is, speaking the JSON-lines
// exec protocol (docs/agent-protocol.md). A turn with MCP access also has it
// in the process's environment (ROOMBRIDGE_MCP_URL, ROOMBRIDGE_MCP_TOKEN):
// the agent may call the same tools over MCP instead of the stdio calls.
func (r *Runtime) execLaunch(t agents.Turn) launch {
	return launch{
		argv: r.Command,
		env:  slices.Concat(r.Env, mcpEnv(t)),
		turn: TurnMessage{Type: MsgTurn, RequestID: t.RequestID, Agent: t.Agent, Session: t.Session, Resumed: t.Resumed, Input: t.Input},
		dec:  execDecoder{},
	}
}

// execDecoder reads exec protocol events: every line must be one.
type execDecoder struct{}

func (execDecoder) decode(line []byte) ([]agents.TurnEvent, error) {
	var ev agents.TurnEvent
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
		return nil, fmt.Errorf("%w: not a JSON event: %.120q", agents.ErrProtocol, line)
	}
	return []agents.TurnEvent{ev}, nil
}

func (execDecoder) partial() string { return "" }

// usage: an exec agent reports its own (usage events, added up by the
// driver).
func (execDecoder) usage() requests.Usage { return requests.Usage{} }

// mcpEnv is the environment that hands a turn's MCP access to the agent
// process (none without it).
func mcpEnv(t agents.Turn) []string {
	if t.MCPURL == "" || t.MCPToken == "" {
		return nil
	}
	return []string{EnvMCPURL + "=" + t.MCPURL, EnvMCPToken + "=" + t.MCPToken}
}
