package process

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
)

// codexArgs is the command line of turn t.
func (r *Runtime) codexArgs(t agents.Turn) []string {
	bin, extra := splitCommand(r.Command, "codex")
	// The bridge picks the working directory, which need not be a git
	// repository.
	args := append([]string{bin, "exec", "--json", "--skip-git-repo-check"}, extra...)
	if t.MCPURL != "" && t.MCPToken != "" {
		server := "mcp_servers." + MCPServerName + "."
		args = append(args,
			"-c", server+"url="+tomlString(t.MCPURL),
			"-c", server+"bearer_token_env_var="+tomlString(EnvMCPToken),
			// An approval waits for a person (codex's default is 60 s).
			"-c", server+"tool_timeout_sec=86400",
			// The bridge's own tools need no approval of Codex's (exec
			// has no one to ask: it refuses every call); permission for
			// actions stays with the sandbox flags and the room.
			"-c", server+`default_tools_approval_mode="approve"`,
			// approval_prompt answers Claude Code's permission prompts.
			"-c", server+`disabled_tools=["approval_prompt"]`)
	}
	if t.Session != "" {
		args = append(args, "resume", t.Session)
	}
	return append(args, Prompt(t))
}

// codexLaunch starts the Codex CLI non-interactively with JSON output:
//
//	codex exec --json --skip-git-repo-check [extra flags] [resume SESSION] PROMPT
//
// The session is the thread ID of thread.started; item.started and
// item.completed of a tool item (a command, an MCP call, a web search, a
// file change) start and end tools (the safe points); turn.completed ends
// the turn with the last agent message as the answer, turn.failed fails it.
// Stdin is /dev/null (codex would read an open pipe into the prompt); a
// cancel is SIGINT at the next safe point, then SIGTERM and SIGKILL. Codex
// exec never asks for approvals: its sandbox is chosen before the turn, by
// the extra flags (e.g. --sandbox workspace-write).
//
// A turn with MCP access (Turn.MCPURL) gets the bridge's agent tools as the
// MCP server "roombridge", configured with -c overrides: its URL, and
// bearer_token_env_var naming ROOMBRIDGE_MCP_TOKEN, which is set in the
// process's environment only (argv is visible to every user of the host).
func (r *Runtime) codexLaunch(t agents.Turn) (launch, error) {
	home, err := r.homeEnv(Codex)
	if err != nil {
		return launch{}, fmt.Errorf("home: %w", err)
	}
	return launch{argv: r.codexArgs(t), env: slices.Concat(home, r.Env, mcpEnv(t)),
		dec: &codexDecoder{session: t.Session, agent: t.Agent, home: r.Home, live: r.Stream}}, nil
}

// tomlString quotes s as a TOML basic string (codex parses -c values as
// TOML).
func tomlString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

type codexLine struct {
	Type  string `json:"type"`
	Usage *struct {
		Input  int64 `json:"input_tokens"`
		Cached int64 `json:"cached_input_tokens"`
		Output int64 `json:"output_tokens"`
	} `json:"usage"`
	ThreadID string     `json:"thread_id"`
	Item     *codexItem `json:"item"`
	Message  string     `json:"message"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type codexItem struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Text    string `json:"text"`
	Command string `json:"command"`
	Server  string `json:"server"`
	Tool    string `json:"tool"`
	Query   string `json:"query"`
	Status  string `json:"status"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
	// Result is an MCP call's result (its text says why a call failed).
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Items []struct {
		Completed bool `json:"completed"`
	} `json:"items"`
}

// codexDecoder maps codex exec --json lines to protocol events.
type codexDecoder struct {
	session   string
	agent     string // the agent's name and home, for a failure's reason
	home      string
	started   bool              // thread.started came
	open      map[string]string // started tool item id → name
	lastText  string
	lastError string
	// live (Runtime.Stream): said, the agent message not yet followed by
	// a tool, is posted as a message when a tool starts (the text between
	// tools); without it only the last message counts, as the answer.
	live bool
	said string
	cost requests.Usage // from turn.completed
}

// usage is what the turn cost, from turn.completed.
func (d *codexDecoder) usage() requests.Usage { return d.cost }

// decode maps one codex exec --json line to protocol events.
func (d *codexDecoder) decode(line []byte) ([]agents.TurnEvent, error) {
	if line[0] != '{' {
		return nil, nil
	}
	var l codexLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("%w: codex: unreadable event: %.120q", agents.ErrProtocol, line)
	}
	switch l.Type {
	case "thread.started":
		d.started = true
		if l.ThreadID != "" && l.ThreadID != d.session {
			d.session = l.ThreadID
			return []agents.TurnEvent{{Type: agents.EventSession, ID: l.ThreadID}}, nil
		}
	case "item.started", "item.updated":
		return d.itemStarted(&l), nil
	case "item.completed":
		return d.itemCompleted(&l), nil
	case "error":
		// Not always fatal (reconnect notices); turn.failed decides.
		d.lastError = l.Message
		return d.codexError(l.Message), nil
	case "turn.completed":
		if u := l.Usage; u != nil {
			// input_tokens counts the cached ones too.
			d.cost = requests.Usage{InputTokens: u.Input - u.Cached, CacheReadTokens: u.Cached, OutputTokens: u.Output}
		}
		return []agents.TurnEvent{{Type: agents.EventFinal, Text: d.lastText}}, nil
	case "turn.failed":
		return d.turnFailed(&l), nil
	}
	return nil, nil
}

// itemStarted reads an item.started or item.updated line: a plan's progress,
// or the start of a tool (after what the agent said before it).
func (d *codexDecoder) itemStarted(l *codexLine) []agents.TurnEvent {
	it := l.Item
	if it == nil {
		return nil
	}
	if it.Type == "todo_list" && len(it.Items) > 0 {
		done := 0
		for _, x := range it.Items {
			if x.Completed {
				done++
			}
		}
		return []agents.TurnEvent{{Type: agents.EventProgress, Percent: done * 100 / len(it.Items), Text: "plan"}}
	}
	if name := codexToolName(it); name != "" && l.Type == "item.started" {
		if d.open == nil {
			d.open = map[string]string{}
		}
		if _, dup := d.open[it.ID]; !dup {
			d.open[it.ID] = name
			evs := sayPending(nil, &d.said)
			return append(evs, agents.TurnEvent{Type: agents.EventTool, Phase: agents.PhaseStart, Name: name})
		}
	}
	return nil
}

// itemCompleted reads an item.completed line: the agent's message (kept),
// its reasoning (shown live), or the end of a tool (a failed MCP call is
// shown).
func (d *codexDecoder) itemCompleted(l *codexLine) []agents.TurnEvent {
	it := l.Item
	if it == nil {
		return nil
	}
	if it.Type == "agent_message" && it.Text != "" {
		d.lastText = it.Text
		if d.live {
			d.said = it.Text
		}
	}
	if it.Type == "reasoning" && it.Text != "" && d.live {
		// Shown live as the agent's thinking, never stored.
		return []agents.TurnEvent{{Type: agents.EventThinking, Text: it.Text}}
	}
	if name, ok := d.open[it.ID]; ok {
		delete(d.open, it.ID)
		end := agents.TurnEvent{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: name}
		if it.Type == "mcp_tool_call" && (it.Status == "failed" || it.Error != nil) {
			// Shown, not passed as an ordinary end of a tool.
			msg := mcpFailure(it)
			return []agents.TurnEvent{{Type: agents.EventMessage, Text: fmt.Sprintf("(%s failed: %s)", name, clip.Line(msg, 300, clip.Bytes))}, end}
		}
		return []agents.TurnEvent{end}
	}
	return nil
}

// turnFailed reads a turn.failed line: the turn's error, with the reason it
// or an earlier error line gave.
func (d *codexDecoder) turnFailed(l *codexLine) []agents.TurnEvent {
	msg := ""
	if l.Error != nil {
		msg = l.Error.Message
	}
	msg = cmp.Or(msg, d.lastError)
	if msg == "" {
		return []agents.TurnEvent{{Type: agents.EventError, Message: "codex: turn failed"}}
	}
	if text, api, _ := codexReason(msg); api {
		msg = "model API: " + text
	}
	return []agents.TurnEvent{{Type: agents.EventError, Message: "codex: " + msg}}
}

// codexToolName names a tool item as the status line shows it; "" for items
// that are not tools (messages, reasoning, plans, warnings).
func codexToolName(it *codexItem) string {
	switch it.Type {
	case "command_execution":
		return "shell: " + clip.Line(it.Command, 80, clip.Bytes)
	case "mcp_tool_call":
		return "mcp: " + it.Server + "." + it.Tool
	case "web_search":
		return "web_search"
	case "file_change":
		return "file_change"
	case "agent_message", "reasoning", "todo_list", "error", "":
		return ""
	}
	return it.Type
}

// partial is what the agent said last, for an incomplete result.
func (d *codexDecoder) partial() string { return lastSaid(d.lastText) }
