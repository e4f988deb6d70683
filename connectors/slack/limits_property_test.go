package slack

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/internal/cardtest"
)

// Every message the bridge renders, with random text (long, CJK, emoji, markdown specials), is
// within Block Kit's and the message's limits as Slack would post it (the blocks of a card, the
// text of each post), keeps a card's buttons, and loses no text of a long message: its parts are
// the whole text, or a file is.
func TestRenderedWithinSlackLimits(t *testing.T) {
	cardtest.Check(t, checkSlack)
}

// checkSlack renders m as the connector posts it and checks every limit.
func checkSlack(m chat.Message) error {
	if m.Card != nil {
		bs := Blocks(*m.Card)
		raw, err := json.Marshal(bs)
		if err != nil {
			return err
		}
		if err := slacktest.CheckBlocks(raw); err != nil {
			return err
		}
		if len(m.Card.Buttons) > 0 && bs[len(bs)-1].BlockType() != "actions" {
			return errf("a card with %d buttons rendered without them", len(m.Card.Buttons))
		}
		return checkText(FallbackText(m))
	}
	p := plan(m)
	var whole strings.Builder
	for _, part := range p.Parts {
		if err := checkText(FallbackText(chat.Message{Text: part})); err != nil {
			return err
		}
		whole.WriteString(part)
	}
	switch {
	case p.File != nil && p.File.Content != m.Text:
		return errf("the file holds %d of the text's %d bytes", len(p.File.Content), len(m.Text))
	case p.File == nil && !sameText(whole.String(), m.Text):
		return errf("the parts hold %d bytes of the text's %d", whole.Len(), len(m.Text))
	}
	return nil
}

func checkText(s string) error {
	if n := utf8.RuneCountInString(s); n > 40000 {
		return errf("message text of %d characters, over 40,000", n)
	}
	return nil
}

// sameText reports whether parts, the parts of a split text with their marks, hold all of text (the
// split may drop white space at a cut).
func sameText(parts, text string) bool {
	strip := func(s string) string {
		s = partMark.ReplaceAllString(s, "")
		return strings.Join(strings.Fields(s), "")
	}
	return strip(parts) == strip(text)
}
