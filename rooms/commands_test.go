package rooms_test

import (
	"testing"

	"github.com/roombridge/roombridge/rooms"
)

// A mention is a command only when it is exactly a command's shape;
// anything else asks the room's first agent.
func TestIsCommand(t *testing.T) {
	for text, want := range map[string]bool{
		"tasks": true, "inbox": true, "help": true, "dismiss T-3": true, "approve R-07": true,
		"deny R20261129-07.1": true, "answer R-07.q1 yes, go": true, "cancel R-07": true, "retry R-07": true, "retry r-07": false,
		"show R-07": true, "revoke slack:U1": true,
		"tasks please": false, "show me the logs": false, "retry": false, "cancel it": false,
		"answer R-07.q1": false, "revoke bob": false, "coder tasks": false, "": false, "fix the build": false,
	} {
		if got := rooms.IsCommand(text); got != want {
			t.Errorf("IsCommand(%q) = %v, want %v", text, got, want)
		}
	}
}
