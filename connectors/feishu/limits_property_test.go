package feishu

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/internal/cardtest"
	"github.com/roombridge/roombridge/internal/longtext"
)

// Every message the bridge renders, with random text (long, CJK, emoji, markdown specials), is
// within card JSON 2.0's limits as a card (a card message, or any message put in place of a card by
// Update), keeps its buttons, and as a text message goes in parts of at most 150 KB of content, or
// as a file, that hold the whole text.
func TestRenderedWithinFeishuLimits(t *testing.T) {
	cardtest.Check(t, checkFeishu)
}

func checkFeishu(m chat.Message) error {
	content, err := cardContent(m, "om_topic")
	if err != nil {
		return err
	}
	if err := feishutest.CheckCard([]byte(content)); err != nil {
		return err
	}
	if m.Card != nil && len(m.Card.Buttons) > 0 && !strings.Contains(content, `"tag":"button"`) {
		return fmt.Errorf("a card with %d buttons rendered without them", len(m.Card.Buttons))
	}
	if m.Card != nil {
		return nil
	}
	p := longtext.Split(m.Text, textBudget-len(`{"text":""}`), jsonCost, m.Request, m.IdempotencyKey)
	var whole strings.Builder
	for _, part := range p.Parts {
		c, err := textContent(part)
		if err != nil {
			return err
		}
		if len(c) > 150<<10 {
			return fmt.Errorf("text content of %d bytes, over 150 KB", len(c))
		}
		var v map[string]string
		if err := json.Unmarshal([]byte(c), &v); err != nil {
			return err
		}
		whole.WriteString(part)
	}
	strip := func(s string) string { return strings.Join(strings.Fields(partMark.ReplaceAllString(s, "")), "") }
	switch {
	case p.File != nil && p.File.Content != m.Text:
		return fmt.Errorf("the file holds %d of the text's %d bytes", len(p.File.Content), len(m.Text))
	case p.File == nil && strip(whole.String()) != strip(m.Text):
		return fmt.Errorf("the parts hold %d bytes of the text's %d", whole.Len(), len(m.Text))
	}
	return nil
}

var partMark = regexp.MustCompile(`\n\n\(part \d+/\d+\)`)
