// Package process runs agent turns as processes, one per turn: the exec
// runtime (the bridge's JSON-lines protocol, docs/agent-protocol.md), Claude
// Code in print mode and codex exec --json. One Runtime serves the three
// kinds; they differ only in the command line, what goes to stdin and how
// stdout is decoded. Starting, reading, cancelling at safe points,
// stopping and judging the end are one driver (proc.go). The scheduler that
// gives the turns is package agents.
package process

import (
	"context"
	"fmt"
	"time"

	"github.com/roombridge/roombridge/agents"
)

// Kind is what runs in the process, and so how the runtime talks to it.
type Kind string

// The kinds, as config.Agent.Kind names them.
const (
	// Exec speaks the exec protocol on stdin and stdout (the default).
	Exec Kind = "exec"
	// Claude is Claude Code in print mode (claude.go).
	Claude Kind = "claude"
	// Codex is codex exec --json (codex.go).
	Codex Kind = "codex"
)

// Runtime runs an agent process per turn (an agents.Runtime). Run only
// reads it, so turns may run at the same time.
type Runtime struct {
	// Kind is what Command is (default Exec).
	Kind Kind
	// Command is the command line. For Claude and Codex it is the CLI
	// (default "claude", "codex") and extra flags after it, such as
	// --model, or for Codex flags of exec such as --sandbox.
	Command []string
	Workdir string
	// Home, if set, is the home of a CLI agent (claude, codex): its HOME,
	// where the CLI keeps its sessions and login (home.go).
	Home string
	// Env is added to the environment the agent inherits.
	Env []string
	// HideEnv names variables of the bridge's environment the agent does
	// not inherit (the config's secrets: config.Config.SecretEnv).
	HideEnv []string
	// Grace is the time between stop escalations (default DefaultGrace).
	Grace time.Duration
	// TurnTimeout bounds one turn (0: no bound); a turn over it fails.
	TurnTimeout time.Duration
	// MaxLine bounds one output line (default MaxLine).
	MaxLine int
	// Stream asks a CLI for its answer as it is written (Claude:
	// --include-partial-messages), shown live in the thread as deltas.
	Stream bool
}

var _ agents.Runtime = (*Runtime)(nil)

// launch is what differs between the kinds for one turn: the command line,
// the environment added to the agent's, the first stdin line, the decoder.
type launch struct {
	argv []string
	env  []string
	// turn, when set, is written to stdin (exec protocol); else stdin is
	// /dev/null.
	turn any
	dec  decoder
	// cleanup removes what the launch made (claude's MCP config); nil:
	// nothing.
	cleanup func()
}

// Run implements agents.Runtime.
func (r *Runtime) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	var l launch
	var err error
	switch r.Kind {
	case Exec, "":
		l = r.execLaunch(t)
	case Claude:
		l, err = r.claudeLaunch(t)
	case Codex:
		l, err = r.codexLaunch(t)
	default:
		err = fmt.Errorf("unknown kind %q (want exec, claude or codex)", r.Kind)
	}
	if err != nil {
		return agents.Outcome{}, err
	}
	if l.cleanup != nil {
		defer l.cleanup()
	}
	p := &process{argv: l.argv, dir: r.Workdir, env: l.env, hide: r.HideEnv, grace: r.Grace, timeout: r.TurnTimeout,
		maxLine: r.MaxLine, turn: l.turn, dec: l.dec}
	out, err := p.run(ctx, t, sink)
	if l.turn == nil {
		// Without the exec protocol (claude, codex) the agent cannot yield:
		// a final answer may be one.
		out.YieldIfWaiting = true
	}
	return out, err
}
