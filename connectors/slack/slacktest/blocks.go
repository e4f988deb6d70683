package slacktest

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Block Kit's published limits (docs.slack.dev, "Block Kit" reference: blocks, block elements,
// composition objects), in characters. CheckBlocks holds a message's blocks to them.
const (
	MaxBlocks         = 50   // blocks in a message
	MaxBlockID        = 255  // block_id
	MaxActionID       = 255  // action_id
	MaxSectionText    = 3000 // a section's text
	MaxSectionFields  = 10   // a section's fields
	MaxFieldText      = 2000 // one field's text
	MaxContextItems   = 10   // a context block's elements
	MaxHeaderText     = 150  // a header's text
	MaxActionElements = 25   // an actions block's elements
	MaxButtonText     = 75   // a button's text
	MaxButtonValue    = 2000 // a button's value
	MaxConfirmTitle   = 100  // a confirmation dialog's title
	MaxConfirmText    = 300  // its text
	MaxConfirmButton  = 30   // its confirm and deny buttons' text
	MaxTextObject     = 3000 // any other text object
)

type blockJSON struct {
	Type     string        `json:"type"`
	BlockID  string        `json:"block_id"`
	Text     *textJSON     `json:"text"`
	Fields   []textJSON    `json:"fields"`
	Elements []elementJSON `json:"elements"`
}

type textJSON struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type elementJSON struct {
	Type     string       `json:"type"`
	Text     string       `json:"-"`
	ActionID string       `json:"action_id"`
	Value    string       `json:"value"`
	Confirm  *confirmJSON `json:"confirm"`
}

func (e *elementJSON) UnmarshalJSON(b []byte) error {
	type plain elementJSON
	var p struct {
		plain
		Text json.RawMessage `json:"text"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = elementJSON(p.plain)
	var t textJSON
	if json.Unmarshal(p.Text, &t) == nil {
		e.Text = t.Text
	} else {
		_ = json.Unmarshal(p.Text, &e.Text) // a button's text is an object, a mrkdwn context element's a string
	}
	return nil
}

type confirmJSON struct {
	Title   textJSON `json:"title"`
	Text    textJSON `json:"text"`
	Confirm textJSON `json:"confirm"`
	Deny    textJSON `json:"deny"`
}

// CheckBlocks reports every Block Kit limit the blocks (a message's "blocks", as JSON) break, nil if
// none: the fake answers invalid_blocks to a message that breaks one, as Slack does, and tests hold
// renderers to the same check.
func CheckBlocks(raw []byte) error {
	var bs []blockJSON
	if err := json.Unmarshal(raw, &bs); err != nil {
		return fmt.Errorf("blocks: %w", err)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	over := func(what, s string, limit int) {
		if n := utf8.RuneCountInString(s); n > limit {
			bad("%s: %d characters, over %d", what, n, limit)
		}
	}
	if len(bs) > MaxBlocks {
		bad("%d blocks, over %d", len(bs), MaxBlocks)
	}
	for i, b := range bs {
		at := fmt.Sprintf("block %d (%s)", i, b.Type)
		over(at+" block_id", b.BlockID, MaxBlockID)
		switch b.Type {
		case "section":
			if b.Text != nil {
				over(at+" text", b.Text.Text, MaxSectionText)
			}
			if len(b.Fields) > MaxSectionFields {
				bad("%s: %d fields, over %d", at, len(b.Fields), MaxSectionFields)
			}
			for _, f := range b.Fields {
				over(at+" field", f.Text, MaxFieldText)
			}
		case "header":
			if b.Text != nil {
				over(at+" text", b.Text.Text, MaxHeaderText)
			}
		case "context":
			if len(b.Elements) > MaxContextItems {
				bad("%s: %d elements, over %d", at, len(b.Elements), MaxContextItems)
			}
			for _, e := range b.Elements {
				over(at+" element text", e.Text, MaxTextObject)
			}
		case "actions":
			checkActions(at, b.Elements, over, bad)
		}
	}
	return errors.Join(errs...)
}

func checkActions(at string, els []elementJSON, over func(what, s string, limit int), bad func(string, ...any)) {
	if len(els) > MaxActionElements {
		bad("%s: %d elements, over %d", at, len(els), MaxActionElements)
	}
	ids := map[string]bool{}
	for j, e := range els {
		el := fmt.Sprintf("%s element %d", at, j)
		over(el+" action_id", e.ActionID, MaxActionID)
		if e.ActionID != "" && ids[e.ActionID] {
			bad("%s: action_id %q not unique in its block", el, e.ActionID)
		}
		ids[e.ActionID] = true
		if e.Type != "button" {
			continue
		}
		over(el+" text", e.Text, MaxButtonText)
		over(el+" value", e.Value, MaxButtonValue)
		if c := e.Confirm; c != nil {
			over(el+" confirm title", c.Title.Text, MaxConfirmTitle)
			over(el+" confirm text", c.Text.Text, MaxConfirmText)
			over(el+" confirm confirm", c.Confirm.Text, MaxConfirmButton)
			over(el+" confirm deny", c.Deny.Text, MaxConfirmButton)
		}
	}
}
