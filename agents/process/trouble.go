package process

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/internal/clip"
)

// Model API trouble and lost sessions, as the CLIs report them: a retry of
// the model API shows in the thread's status line, an authentication
// failure fails the turn at once (the CLIs would retry it for minutes), and
// a resume of a session the CLI no longer has is agents.ErrSessionLost (the
// scheduler continues the request in a fresh session).

// evStatus is an event the CLI decoders make: the runtime's own status of
// the turn (a model API retry), shown in the thread's status line.
const evStatus = "runtime_status"

// statusSink is a Sink with a status line (the scheduler's).
type statusSink interface {
	Status(ctx context.Context, text string) error
}

// status shows text in the thread's status line, if the sink has one.
func (d *driver) status(ctx context.Context, text string) error {
	if s, ok := d.sink.(statusSink); ok {
		return s.Status(ctx, text)
	}
	return nil
}

// ender is a decoder that judges, from stderr, an agent that exited without
// a final answer (codex: a lost session prints only to stderr).
type ender interface {
	end(stderr string) error
}

// judge is the decoder's reason for an end without an answer, or nil.
func (d *driver) judge() error {
	if e, ok := d.p.dec.(ender); ok {
		return e.end(d.stderr.String())
	}
	return nil
}

// authFailure is the reason of a turn failed at once on the model API's
// authentication failure: it names the agent and where its credentials
// come from.
func authFailure(cli, agent, what, creds string) agents.TurnEvent {
	return agents.TurnEvent{Type: agents.EventError, Message: fmt.Sprintf(
		"%s: model API: %s: the credentials of agent %s were refused; they come from %s", cli, what, cmp.Or(agent, "(unnamed)"), creds)}
}

// retryStatus is the status line of a model API retry.
func retryStatus(what string, attempt, max int) agents.TurnEvent {
	text := "model API: " + what
	if attempt > 0 {
		text += fmt.Sprintf(", retry %d", attempt)
		if max > 0 {
			text += fmt.Sprintf("/%d", max)
		}
	}
	return agents.TurnEvent{Type: evStatus, Text: clip.Line(text, 200, clip.Bytes)}
}

// authStatus reports whether an HTTP status is an authentication failure.
func authStatus(code int) bool { return code == 401 || code == 403 }

// claudeCreds says where Claude Code's credentials come from: the key
// source its init event named, else the environment and its config
// directory.
func claudeCreds(keySource, home string) string {
	where := "~/.claude"
	if home != "" {
		where = home + "/.claude"
	}
	switch keySource {
	case "", "none":
		return "ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in the agent's environment, or the login kept in " + where
	case "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN":
		return keySource + " in the agent's environment (the bridge's, unless the agent's config sets it)"
	}
	return keySource + " (Claude Code's key source; its config is in " + where + ")"
}

// claudeRetry maps a system/api_retry line.
func (d *claudeDecoder) claudeRetry(l *claudeLine) agents.TurnEvent {
	code := 0
	if l.ErrorStatus != nil {
		code = *l.ErrorStatus
	}
	what := cmp.Or(l.Error, "error")
	if code != 0 {
		what += fmt.Sprintf(" (%d)", code)
	}
	if l.Error == "authentication_failed" || authStatus(code) {
		return authFailure("claude", d.agent, what, claudeCreds(d.keySource, d.home))
	}
	return retryStatus(what, l.Attempt, l.MaxRetries)
}

// claudeLost reports a result line that says the resumed session is gone:
// "No conversation found with session ID", with no init before it.
func (d *claudeDecoder) claudeLost(l *claudeLine, msg string) error {
	if d.started || !strings.Contains(msg, "No conversation found") {
		return nil
	}
	return fmt.Errorf("%w: claude: %s", agents.ErrSessionLost, msg)
}

// codexCreds says where Codex's credentials come from.
func codexCreds(home string) string {
	where := "$CODEX_HOME (~/.codex)"
	if home != "" {
		where = home + "/.codex"
	}
	return "the model provider's env_key (OPENAI_API_KEY by default) in the agent's environment, or the login in " + where + "/auth.json"
}

var (
	codexStatusRE    = regexp.MustCompile(`status:? (\d{3})\b`)
	codexReconnectRE = regexp.MustCompile(`^Reconnecting\.\.\. (\d+)/(\d+) \((.*)\)$`)
)

// codexReason reads a Codex model API error message: the HTTP status and
// the API's own message out of a JSON error body (Codex may print the body
// raw: {"error":{"message":"input is bad",...}} → "input is bad"), else
// the message without its URL ("unexpected status 401 Unauthorized: MSG,
// url: URL" → "401 MSG"). api: the message is the model API's (a status
// or a body); auth: it is an authentication failure.
func codexReason(msg string) (text string, api, auth bool) {
	code := 0
	if m := codexStatusRE.FindStringSubmatch(msg); m != nil {
		code, _ = strconv.Atoi(m[1])
	}
	text = msg
	if i, j := strings.IndexByte(msg, '{'), strings.LastIndexByte(msg, '}'); i >= 0 && j > i {
		var body struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(msg[i:j+1]), &body) == nil && (body.Error.Message != "" || body.Error.Type != "") {
			text, api = cmp.Or(body.Error.Message, body.Error.Type), true
			auth = body.Error.Code == "invalid_api_key" || body.Error.Type == "authentication_error"
		}
	} else if _, after, ok := strings.Cut(msg, "status "+strconv.Itoa(code)); ok && code != 0 {
		if _, m, ok := strings.Cut(after, ": "); ok {
			text = m
		}
	}
	if i := strings.LastIndex(text, ", url: "); i >= 0 {
		text = text[:i]
	}
	text = clip.Line(strings.TrimSpace(text), 300, clip.Bytes)
	if code != 0 && !strings.Contains(text, strconv.Itoa(code)) {
		text = strconv.Itoa(code) + " " + text
	}
	return text, api || code != 0, auth || authStatus(code)
}

// codexError maps an "error" line: a reconnect is a retry in the status
// line, an authentication failure fails the turn at once.
func (d *codexDecoder) codexError(msg string) []agents.TurnEvent {
	attempt, max, inner := 0, 0, msg
	if m := codexReconnectRE.FindStringSubmatch(msg); m != nil {
		attempt, _ = strconv.Atoi(m[1])
		max, _ = strconv.Atoi(m[2])
		inner = m[3]
	}
	text, _, auth := codexReason(inner)
	if auth {
		return []agents.TurnEvent{authFailure("codex", d.agent, text, codexCreds(d.home))}
	}
	if attempt == 0 {
		return nil // not always fatal; turn.failed decides
	}
	return []agents.TurnEvent{retryStatus(text, attempt, max)}
}

// end implements ender: a resume of a thread Codex does not have prints
// "no rollout found" on stderr and nothing on stdout.
func (d *codexDecoder) end(stderr string) error {
	if d.started || !strings.Contains(stderr, "no rollout found") {
		return nil
	}
	return fmt.Errorf("%w: codex: no rollout found for thread %s", agents.ErrSessionLost, d.session)
}

var _ ender = (*codexDecoder)(nil)

// mcpFailure is why a failed mcp_tool_call item failed: its error, else the
// text of its result (a tool's error result).
func mcpFailure(it *codexItem) string {
	if it.Error != nil && it.Error.Message != "" {
		return it.Error.Message
	}
	var parts []string
	if it.Result != nil {
		for _, c := range it.Result.Content {
			if c.Text != "" {
				parts = append(parts, c.Text)
			}
		}
	}
	return cmp.Or(strings.Join(parts, " "), noReason)
}
