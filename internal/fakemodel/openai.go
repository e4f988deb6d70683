package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// OpenAI starts a fake of OpenAI's Responses API: POST /v1/responses
// answers as the script says, streamed as response.created, one
// response.output_item.added / .done pair per output item (a message with
// its output_text deltas, or a function_call) and response.completed.
// GET /v1/models answers an empty list; anything else is a 404 (neither is
// recorded). Point Codex at it with a model_providers entry whose base_url
// is URL+"/v1" and wire_api = "responses" (CodexConfig).
func OpenAI(t testing.TB, script Script) *Server {
	return start(t, script, writeOpenAI, func(_ *Server, w http.ResponseWriter, r Request) bool {
		switch {
		case r.Path == "/v1/responses":
			return false
		case strings.HasSuffix(r.Path, "/models"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[],"models":[]}`))
		default:
			http.NotFound(w, nil)
		}
		return true
	})
}

// OpenAIError is the body of an error of the Responses API.
func OpenAIError(kind, code, message string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": kind, "code": code, "message": message, "param": nil}})
	return string(b)
}

// CodexConfig is a Codex config.toml that uses the fake at url as its only
// model provider, with no retries beyond retries, and no update checks,
// analytics or feedback.
func CodexConfig(url string, retries int) string {
	return fmt.Sprintf(`model = "gpt-fake"
model_provider = "fake"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[history]
persistence = "none"

[model_providers.fake]
name = "fake"
base_url = %q
wire_api = "responses"
env_key = "FAKE_OPENAI_API_KEY"
request_max_retries = %d
stream_max_retries = %d
stream_idle_timeout_ms = 20000
`, url+"/v1", retries, retries)
}

func writeOpenAI(w http.ResponseWriter, _ Request, rep Reply) {
	s := newSSE(w)
	resp := map[string]any{"id": "resp_fake", "object": "response", "status": "in_progress", "output": []any{}}
	s.event("response.created", map[string]any{"type": "response.created", "response": resp})
	var done []any
	idx := 0
	if rep.Text != "" {
		added := map[string]any{"type": "message", "id": "msg_fake", "role": "assistant", "status": "in_progress", "content": []any{}}
		s.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx, "item": added})
		first := rep.Text
		if rep.Drop {
			first = half(rep.Text)
		}
		s.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_fake",
			"output_index": idx, "content_index": 0, "delta": first})
		if rep.Drop {
			drop(w)
			return
		}
		item := map[string]any{"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": rep.Text, "annotations": []any{}}}}
		s.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
		done = append(done, item)
		idx++
	}
	for i, tc := range rep.Tools {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%02d", i+1)
		}
		item := map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": id, "name": tc.Name,
			"arguments": inputJSON(tc.Input), "status": "completed"}
		if tc.Namespace != "" {
			item["namespace"] = tc.Namespace
		}
		s.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx, "item": item})
		s.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
		done = append(done, item)
		idx++
	}
	resp["status"], resp["output"] = "completed", done
	resp["usage"] = map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
		"input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}}
	s.event("response.completed", map[string]any{"type": "response.completed", "response": resp})
}
