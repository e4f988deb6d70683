package process

import (
	"fmt"
	"strings"

	"github.com/roombridge/roombridge/agents"
)

// BridgeTools are the tools of the bridge's MCP server that a CLI agent's
// turn prompt names (approval_prompt, Claude Code's permission prompt, is
// not for the model).
var BridgeTools = []string{"ask_agent", "background_run", "task_status", "request_approval", "ask_user", "report_progress"}

// Prompt renders a turn's input as the prompt of a CLI agent (claude,
// codex): the ask first, then each other item under a header that says what
// it is. It never starts with "-", so it cannot be read as a flag.
func Prompt(t agents.Turn) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[roombridge request %s]", t.RequestID)
	if t.Resumed {
		b.WriteString(" The bridge restarted while you worked on this request; continue where you left off.")
	}
	if t.MCPURL != "" {
		// Named, so that the model knows them before it needs one.
		fmt.Fprintf(&b, " The bridge's tools (MCP server %s): %s.", MCPServerName, strings.Join(BridgeTools, ", "))
	}
	b.WriteString("\n")
	for _, in := range t.Input {
		var head string
		switch in.Kind {
		case agents.InputAsk:
			b.WriteString("\n" + in.Text + "\n")
			continue
		case agents.InputReference:
			head = fmt.Sprintf("result of %s (%s), mentioned in the ask", in.RequestID, in.State)
		case agents.InputReply:
			head = "reply in the thread from " + in.From
		case agents.InputTaskResult:
			head = fmt.Sprintf("background task %s ended (%s)", in.TaskID, in.State)
		case agents.InputAnswer:
			head = fmt.Sprintf("answer of %s (%s)", in.RequestID, in.State)
		case agents.InputRecap:
			head = "recap: your earlier session of this request was lost"
		default:
			head = in.Kind
		}
		fmt.Fprintf(&b, "\n--- %s ---\n%s\n", head, in.Text)
	}
	return b.String()
}
