package process

import "github.com/roombridge/roombridge/agents"

// sayPending appends said, the text an agent said before a tool started
// (if any), to evs as a message, and clears it.
func sayPending(evs []agents.TurnEvent, said *string) []agents.TurnEvent {
	if *said != "" {
		evs = append(evs, agents.TurnEvent{Type: agents.EventMessage, Text: *said})
		*said = ""
	}
	return evs
}

// lastSaid is a decoder's partial result: the agent's last text, if any.
func lastSaid(text string) string {
	if text == "" {
		return ""
	}
	return "last said: " + text
}
