package process

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/requests"
)

// ApprovalPromptTool is the MCP tool of the bridge that answers Claude
// Code's permission prompts (--permission-prompt-tool).
const ApprovalPromptTool = "mcp__" + MCPServerName + "__approval_prompt"

// mcpToolTimeout is MCP_TOOL_TIMEOUT (ms) for Claude Code when the bridge's
// environment sets none: an approval waits for a person, up to the default
// approval TTL (24 h); Claude's default would give up long before.
const mcpToolTimeout = "86400000"

// claudeArgs is the command line of turn t; mcpConfig is the path of its
// MCP config file ("" for a turn without MCP access).
func (r *Runtime) claudeArgs(t agents.Turn, mcpConfig string) []string {
	bin, extra := splitCommand(r.Command, "claude")
	args := []string{bin, "-p", Prompt(t), "--output-format", "stream-json", "--verbose"}
	if r.Stream {
		// stream_event lines: the answer's text deltas (shown live).
		args = append(args, "--include-partial-messages")
	}
	if t.Session != "" {
		// The = form: --resume takes an optional value, so a value starting
		// with a dash would otherwise be read as a flag.
		args = append(args, "--resume="+t.Session)
	}
	if mcpConfig != "" {
		args = append(args, "--mcp-config", mcpConfig)
		if !hasFlag(extra, "--permission-prompt-tool") {
			args = append(args, "--permission-prompt-tool", ApprovalPromptTool)
		}
		if !hasFlag(extra, "--allowedTools", "--allowed-tools") {
			args = append(args, "--allowedTools", "mcp__"+MCPServerName)
		}
	}
	return append(args, extra...)
}

// claudeLaunch starts Claude Code in print mode with streaming JSON output:
//
//	claude -p PROMPT --output-format stream-json --verbose [--resume=SESSION] [extra flags]
//
// The session ID comes from the init event (and is replaced by a later
// event's if it differs); tool_use blocks start tools and tool_result blocks
// end them (the safe points); the result event is the final answer or the
// failure. Stdin is /dev/null; a cancel is SIGINT at the next safe point,
// then SIGTERM and SIGKILL.
//
// A turn with MCP access (Turn.MCPURL) gets the bridge's agent tools: the
// URL and the turn's token go in an MCP config file (mode 0600, in a
// private temporary directory removed when the turn ends; the token is
// never in argv), passed with --mcp-config. Unless the configured command
// sets them itself, --permission-prompt-tool mcp__roombridge__approval_prompt
// turns Claude Code's permission prompts into approvals of the room, and
// --allowedTools mcp__roombridge lets it call the bridge's tools without
// asking. A command that sets --allowedTools keeps its own list: add
// mcp__roombridge to it, or each tool call becomes an approval.
func (r *Runtime) claudeLaunch(t agents.Turn) (launch, error) {
	home, err := r.homeEnv(Claude)
	if err != nil {
		return launch{}, fmt.Errorf("home: %w", err)
	}
	l := launch{env: slices.Concat(home, r.Env), dec: &claudeDecoder{session: t.Session, agent: t.Agent, home: r.Home, live: r.Stream}}
	config := ""
	if t.MCPURL != "" && t.MCPToken != "" {
		dir, err := os.MkdirTemp("", "roombridge-mcp-")
		if err != nil {
			return launch{}, fmt.Errorf("mcp config: %w", err)
		}
		l.cleanup = func() { os.RemoveAll(dir) }
		config = filepath.Join(dir, "mcp.json")
		if err := writeMCPConfig(config, t.MCPURL, t.MCPToken); err != nil {
			l.cleanup()
			return launch{}, fmt.Errorf("mcp config: %w", err)
		}
		l.env = slices.Concat(claudeMCPEnv(), l.env)
	}
	l.argv = r.claudeArgs(t, config)
	return l, nil
}

// writeMCPConfig writes Claude Code's MCP config naming the bridge's server
// with the turn's token, readable by the bridge's user only.
func writeMCPConfig(path, url, token string) error {
	type server struct {
		Type    string            `json:"type"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	b, err := json.Marshal(map[string]map[string]server{"mcpServers": {MCPServerName: {
		Type: "http", URL: url, Headers: map[string]string{"Authorization": "Bearer " + token}}}})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// hasFlag reports whether args set one of the flags (as "--flag value" or
// "--flag=value").
func hasFlag(args []string, flags ...string) bool {
	for _, a := range args {
		for _, f := range flags {
			if a == f || strings.HasPrefix(a, f+"=") {
				return true
			}
		}
	}
	return false
}

// claudeLine is the part of a stream-json line the adapter reads.
type claudeLine struct {
	Type            string          `json:"type"`
	Subtype         string          `json:"subtype"`
	SessionID       string          `json:"session_id"`
	ParentToolUseID *string         `json:"parent_tool_use_id"`
	Message         *claudeMessage  `json:"message"`
	Result          *string         `json:"result"`
	IsError         bool            `json:"is_error"`
	Errors          []string        `json:"errors"`
	Error           string          `json:"error"`
	Denials         []claudeDenial  `json:"permission_denials"`
	MCPServers      []claudeMCPStat `json:"mcp_servers"`
	// system/init and system/api_retry (trouble.go).
	APIKeySource   string        `json:"apiKeySource"`
	Attempt        int           `json:"attempt"`
	MaxRetries     int           `json:"max_retries"`
	ErrorStatus    *int          `json:"error_status"`
	APIErrorStatus *int          `json:"api_error_status"`
	Event          *claudeStream `json:"event"`
	Usage          *claudeUsage  `json:"usage"`
	CostUSD        float64       `json:"total_cost_usd"`
}

// claudeStream is the event of a stream_event line (the Messages API's
// streaming event): only its text deltas are read.
type claudeStream struct {
	Type  string `json:"type"`
	Delta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"delta"`
}

// claudeUsage is the result event's token count.
type claudeUsage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
}

type claudeMessage struct {
	Content json.RawMessage `json:"content"`
}

type claudeBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	ToolUseID string `json:"tool_use_id"`
}

type claudeDenial struct {
	ToolName string `json:"tool_name"`
}

type claudeMCPStat struct {
	Name   string `json:"name"`
	Status string `json:"status"`
}

// claudeDecoder maps stream-json lines to protocol events.
type claudeDecoder struct {
	session   string
	agent     string // the agent's name and home, for a failure's reason
	home      string
	started   bool // an init event came
	keySource string
	tools     map[string]string // open tool_use id → name
	lastText  string
	// live (Runtime.Stream): said, the assistant text not yet followed by
	// a tool, is posted as a message when a tool starts (the text between
	// tools); without it that text is only kept for the partial result.
	live bool
	said string
	cost requests.Usage // from the result event
}

// usage is what the turn cost, from the result line.
func (d *claudeDecoder) usage() requests.Usage { return d.cost }

// decode maps one stream-json line to protocol events.
func (d *claudeDecoder) decode(line []byte) ([]agents.TurnEvent, error) {
	if line[0] != '{' {
		return nil, nil // not JSON (the SDK skips such lines too)
	}
	var l claudeLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("%w: claude: unreadable event: %.120q", agents.ErrProtocol, line)
	}
	var evs []agents.TurnEvent
	if l.SessionID != "" && l.SessionID != d.session {
		// Always keep the latest: resume may or may not keep the ID.
		d.session = l.SessionID
		evs = append(evs, agents.TurnEvent{Type: agents.EventSession, ID: l.SessionID})
	}
	if l.ParentToolUseID != nil && *l.ParentToolUseID != "" {
		return evs, nil // a sub-agent's step, inside a running Task tool
	}
	switch l.Type {
	case "stream_event":
		if e := l.Event; e != nil && e.Type == "content_block_delta" {
			if e.Delta.Type == "text_delta" && e.Delta.Text != "" {
				evs = append(evs, agents.TurnEvent{Type: agents.EventDelta, Text: e.Delta.Text})
			}
		}
	case "system":
		evs = append(evs, d.system(&l)...)
	case "assistant":
		evs = append(evs, d.assistant(&l)...)
	case "user":
		for _, b := range blocks(l.Message) {
			if name, ok := d.tools[b.ToolUseID]; ok && b.Type == "tool_result" {
				delete(d.tools, b.ToolUseID)
				evs = append(evs, agents.TurnEvent{Type: agents.EventTool, Phase: agents.PhaseEnd, Name: name})
			}
		}
	case "result":
		res, err := d.result(&l)
		if err != nil {
			return nil, err
		}
		evs = append(evs, res...)
	}
	return evs, nil
}

// system reads a system line: an API retry, or the init (which says which
// MCP servers did not connect).
func (d *claudeDecoder) system(l *claudeLine) []agents.TurnEvent {
	if l.Subtype == "api_retry" {
		return []agents.TurnEvent{d.claudeRetry(l)}
	}
	var evs []agents.TurnEvent
	if l.Subtype == "init" {
		d.started, d.keySource = true, l.APIKeySource
		for _, s := range l.MCPServers {
			if s.Status != "connected" {
				evs = append(evs, agents.TurnEvent{Type: agents.EventMessage, Text: fmt.Sprintf("(MCP server %s is %s)", s.Name, s.Status)})
			}
		}
	}
	return evs
}

// assistant reads an assistant message: its text is kept (and, live, said
// when a tool starts); each tool_use starts a tool.
func (d *claudeDecoder) assistant(l *claudeLine) []agents.TurnEvent {
	var evs []agents.TurnEvent
	for _, b := range blocks(l.Message) {
		switch b.Type {
		case "text":
			if strings.TrimSpace(b.Text) != "" {
				d.lastText = b.Text
				if d.live {
					d.said += b.Text
				}
			}
		case "tool_use":
			evs = sayPending(evs, &d.said)
			if d.tools == nil {
				d.tools = map[string]string{}
			}
			d.tools[b.ID] = b.Name
			evs = append(evs, agents.TurnEvent{Type: agents.EventTool, Phase: agents.PhaseStart, Name: b.Name})
		}
	}
	return evs
}

// result reads the result line: its usage, the tools Claude Code was denied,
// and the final answer or the error (a lost session is returned as an error).
func (d *claudeDecoder) result(l *claudeLine) ([]agents.TurnEvent, error) {
	var evs []agents.TurnEvent
	if u := l.Usage; u != nil {
		d.cost = requests.Usage{InputTokens: u.Input, OutputTokens: u.Output, CacheReadTokens: u.CacheRead,
			CacheWriteTokens: u.CacheWrite, CostUSD: l.CostUSD}
	}
	if len(l.Denials) > 0 {
		var names []string
		for _, dn := range l.Denials {
			names = append(names, dn.ToolName)
		}
		evs = append(evs, agents.TurnEvent{Type: agents.EventMessage, Text: "Claude Code was not permitted to use: " + strings.Join(names, ", ")})
	}
	text := ""
	if l.Result != nil {
		text = *l.Result
	}
	if l.IsError || strings.HasPrefix(l.Subtype, "error") {
		msg := cmp.Or(strings.Join(l.Errors, "; "), text, l.Subtype, noReason)
		if err := d.claudeLost(l, msg); err != nil {
			return nil, err
		}
		if l.APIErrorStatus != nil && authStatus(*l.APIErrorStatus) {
			return append(evs, authFailure("claude", d.agent, fmt.Sprintf("%s (%d)", msg, *l.APIErrorStatus), claudeCreds(d.keySource, d.home))), nil
		}
		return append(evs, agents.TurnEvent{Type: agents.EventError, Message: "claude: " + msg}), nil
	}
	if text == "" {
		text = d.lastText
	}
	return append(evs, agents.TurnEvent{Type: agents.EventFinal, Text: text}), nil
}

// blocks returns a message's content blocks (content may be a plain string).
func blocks(m *claudeMessage) []claudeBlock {
	if m == nil || len(m.Content) == 0 || m.Content[0] != '[' {
		return nil
	}
	var bs []claudeBlock
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

// partial is what the agent said last, for an incomplete result.
func (d *claudeDecoder) partial() string { return lastSaid(d.lastText) }

// splitCommand splits a configured CLI command into the binary (def when the
// command is empty) and the extra flags that follow it.
func splitCommand(command []string, def string) (string, []string) {
	if len(command) == 0 {
		return def, nil
	}
	return command[0], command[1:]
}
