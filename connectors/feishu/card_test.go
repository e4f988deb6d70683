package feishu

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/chat"
)

// TestDenyAsksToConfirm: a button with Confirm (an approval's Deny) gets
// card JSON 2.0's confirm dialog; one without has none.
func TestDenyAsksToConfirm(t *testing.T) {
	content, err := cardContent(chat.Message{Card: &chat.Card{Title: "Approval needed", BlockID: "approval:R1:1", Buttons: []chat.Button{
		{ActionID: "approve", Label: "Approve", Value: "R1"},
		{ActionID: "deny", Label: "Deny", Value: "R1", Style: "danger", Confirm: "Deny R1?"}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	var c card
	if err := json.Unmarshal([]byte(content), &c); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(content, `"confirm"`); n != 1 {
		t.Errorf("%d confirm dialogs in %s, want 1", n, content)
	}
	if !strings.Contains(content, `"confirm":{"title":{"tag":"plain_text","content":"Deny?"},"text":{"tag":"plain_text","content":"Deny R1?"}}`) {
		t.Errorf("no confirm on Deny: %s", content)
	}
}
