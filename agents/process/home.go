package process

import (
	"os"
	"path/filepath"
)

// Where the CLIs keep their sessions, and so what a resume needs: Claude
// Code keeps its conversations under $CLAUDE_CONFIG_DIR (default
// ~/.claude, in projects/<cwd>/<session>.jsonl); Codex keeps its threads
// (rollouts) under $CODEX_HOME (default ~/.codex, in sessions/). A bridge
// instance that resumes a request another instance started needs the same
// folder (a shared volume): else the resume finds no session, and the
// scheduler continues the request in a fresh one (agents.ErrSessionLost).

// homeEnv is the environment that gives a CLI agent Runtime.Home as its
// home: HOME, and the CLI's own folder under it (CLAUDE_CONFIG_DIR,
// CODEX_HOME), so that a variable of the bridge's environment cannot point
// it elsewhere. The CLI's folder is made if missing (Codex wants it to
// exist). Nil when Home is not set.
func (r *Runtime) homeEnv(k Kind) ([]string, error) {
	if r.Home == "" {
		return nil, nil
	}
	name, dir := "CLAUDE_CONFIG_DIR", filepath.Join(r.Home, ".claude")
	if k == Codex {
		name, dir = "CODEX_HOME", filepath.Join(r.Home, ".codex")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return []string{"HOME=" + r.Home, name + "=" + dir}, nil
}

// claudeMCPEnv is the environment of a Claude Code turn with the bridge's
// tools, for each variable the bridge's environment does not set itself:
//   - MCP_TOOL_TIMEOUT: an approval waits for a person (mcpToolTimeout);
//   - ENABLE_TOOL_SEARCH=false: Claude Code 2.1 defers MCP tools behind its
//     tool search (the model sees only their names and must search before
//     it can call one); off, the bridge's tools' definitions are in every
//     model request, as for the built-in tools.
func claudeMCPEnv() []string {
	var env []string
	for _, kv := range [][2]string{{"MCP_TOOL_TIMEOUT", mcpToolTimeout}, {"ENABLE_TOOL_SEARCH", "false"}} {
		if os.Getenv(kv[0]) == "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}
