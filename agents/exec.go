package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Exec runs an agent process per turn, speaking the JSON-lines exec protocol
// (docs/agent-protocol.md). A turn with MCP access also has it in the
// process's environment (ROOMBRIDGE_MCP_URL, ROOMBRIDGE_MCP_TOKEN): the agent
// may call the same tools over MCP instead of the stdio calls.
type Exec struct {
	Command []string
	Workdir string
	Env     []string
	// HideEnv names variables of the bridge's environment the agent does
	// not inherit (the config's secrets: config.Config.SecretEnv).
	HideEnv []string
	// Grace is the time between stop escalations (default DefaultGrace).
	Grace time.Duration
	// TurnTimeout bounds one turn (0: no bound); a turn over it fails.
	TurnTimeout time.Duration
	// MaxLine bounds one output line (default MaxLine).
	MaxLine int
}

// Run implements Runtime.
func (x *Exec) Run(ctx context.Context, t Turn, sink Sink) (Outcome, error) {
	p := &process{
		argv: x.Command, dir: x.Workdir, env: slices.Concat(x.Env, mcpEnv(t)), hide: x.HideEnv, grace: x.Grace, timeout: x.TurnTimeout, maxLine: x.MaxLine,
		turn: TurnMessage{Type: MsgTurn, RequestID: t.RequestID, Agent: t.Agent, Session: t.Session, Resumed: t.Resumed, Input: t.Input},
		dec:  execDecoder{},
	}
	return p.run(ctx, t, sink)
}

// execDecoder reads exec protocol events: every line must be one.
type execDecoder struct{}

func (execDecoder) decode(line []byte) ([]Event, error) {
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
		return nil, fmt.Errorf("%w: not a JSON event: %.120q", ErrProtocol, line)
	}
	return []Event{ev}, nil
}

func (execDecoder) partial() string { return "" }

// mcpEnv is the environment that hands a turn's MCP access to the agent
// process (none without it).
func mcpEnv(t Turn) []string {
	if t.MCPURL == "" || t.MCPToken == "" {
		return nil
	}
	return []string{EnvMCPURL + "=" + t.MCPURL, EnvMCPToken + "=" + t.MCPToken}
}
