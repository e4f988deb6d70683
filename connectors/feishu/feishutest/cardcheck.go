package feishutest

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Card JSON 2.0's published limits (open.feishu.cn, "卡片 JSON 2.0 结构" and the components'
// pages). CheckCard holds a card to them.
const (
	MaxCardBytes    = cardMaxBytes // the card's JSON, as sent
	MaxCardElements = 200          // elements and components in one card
	MaxElementID    = 20           // an element_id's length
)

// elementIDPattern is what an element_id may be: a letter first, then letters, digits and
// underscores, unique within its card.
var elementIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// Top-level and config properties of a 2.0 card the fake knows; 2.0 refuses properties it does
// not support (1.0 ignored them).
var (
	cardKeys   = map[string]bool{"schema": true, "config": true, "card_link": true, "header": true, "body": true}
	configKeys = map[string]bool{"update_multi": true, "streaming_mode": true, "streaming_config": true,
		"summary": true, "enable_forward": true, "enable_forward_interaction": true, "width_mode": true,
		"use_custom_translation": true, "locales": true, "style": true}
)

// CheckCard reports every card JSON 2.0 limit card (an interactive message's content, or a CardKit
// card's data) breaks, nil if none: schema "2.0", known top-level and config properties, shared
// (update_multi not false), at most MaxCardBytes, at most MaxCardElements elements, element IDs of
// the right form, unique, and callback values that are objects. The fake answers a send or a PATCH
// that breaks one with an error, as Feishu does, and tests hold renderers to the same check.
func CheckCard(card []byte) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(card) > MaxCardBytes {
		bad("card of %d bytes, over %d", len(card), MaxCardBytes)
	}
	var doc map[string]any
	if err := json.Unmarshal(card, &doc); err != nil {
		return fmt.Errorf("card: %w", err)
	}
	if doc["schema"] != "2.0" {
		bad("schema %v, not \"2.0\"", doc["schema"])
	}
	for k := range doc {
		if !cardKeys[k] {
			bad("unknown property %q", k)
		}
	}
	if cfg, ok := doc["config"].(map[string]any); ok {
		for k := range cfg {
			if !configKeys[k] {
				bad("unknown config property %q", k)
			}
		}
		if cfg["update_multi"] == false {
			bad("update_multi false: 2.0 cards are shared")
		}
	}
	n, ids := 0, map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			if _, ok := v["tag"]; ok {
				n++
			}
			if id, ok := v["element_id"].(string); ok {
				if len(id) > MaxElementID || !elementIDPattern.MatchString(id) {
					bad("element_id %q: a letter, then letters, digits, underscores, at most %d", id, MaxElementID)
				}
				if ids[id] {
					bad("element_id %q not unique", id)
				}
				ids[id] = true
			}
			if v["type"] == "callback" {
				if _, ok := v["value"].(map[string]any); !ok {
					bad("callback value %v is not an object", v["value"])
				}
			}
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc["header"])
	walk(doc["body"])
	if n > MaxCardElements {
		bad("%d elements, over %d", n, MaxCardElements)
	}
	return errors.Join(errs...)
}
