package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// Anthropic starts a fake of Anthropic's Messages API: POST /v1/messages
// answers as the script says, streamed (message_start, content blocks of
// text and tool_use, message_delta, message_stop) or, for a request that
// does not stream, as one JSON message. POST /v1/messages/count_tokens and
// anything else the CLI asks are answered without asking the script (and
// are not recorded). Point Claude Code at it with ANTHROPIC_BASE_URL=URL.
func Anthropic(t testing.TB, script Script) *Server {
	return start(t, script, writeAnthropic, func(_ *Server, w http.ResponseWriter, r Request) bool {
		switch r.Path {
		case "/v1/messages":
			return false
		case "/v1/messages/count_tokens":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"input_tokens":10}`))
		default:
			http.NotFound(w, nil)
		}
		return true
	})
}

// AnthropicError is the body of an error of the Messages API.
func AnthropicError(kind, message string) string {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": message}})
	return string(b)
}

func anthropicBlocks(rep Reply) []map[string]any {
	var bs []map[string]any
	if rep.Text != "" {
		bs = append(bs, map[string]any{"type": "text", "text": rep.Text})
	}
	for i, tc := range rep.Tools {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%02d", i+1)
		}
		var in any = map[string]any{}
		if tc.Input != nil {
			_ = json.Unmarshal([]byte(inputJSON(tc.Input)), &in)
		}
		bs = append(bs, map[string]any{"type": "tool_use", "id": id, "name": tc.Name, "input": in})
	}
	return bs
}

func writeAnthropic(w http.ResponseWriter, r Request, rep Reply) {
	model, _ := r.JSON["model"].(string)
	stop := "end_turn"
	if len(rep.Tools) > 0 {
		stop = "tool_use"
	}
	blocks := anthropicBlocks(rep)
	usage := map[string]int{"input_tokens": 10, "output_tokens": 5}
	if !r.Stream() {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	s := newSSE(w)
	s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake", "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 10, "output_tokens": 1}}})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			text := b["text"].(string)
			s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			first := text
			if rep.Drop {
				first = half(text)
			}
			s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": first}})
			if rep.Drop {
				drop(w)
				return
			}
		case "tool_use":
			s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			in, _ := json.Marshal(b["input"])
			s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(in)}})
		}
		s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 5}})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}
