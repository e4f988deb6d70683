// Package fakemodel serves fakes of the model APIs the agent CLIs call, for
// tests that run the real Claude Code and Codex binaries: Anthropic's
// Messages API (POST /v1/messages, streamed as server-sent events) and
// OpenAI's Responses API (POST /v1/responses). Each test scripts the
// replies (a text, tool calls, an HTTP error, a stream that drops) and reads
// back every request the CLI sent, so it can assert what reached the model
// (the tools array, the tool results).
package fakemodel

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request a CLI sent.
type Request struct {
	Path   string
	Header http.Header
	Body   []byte
	// JSON is the body decoded (nil when it is not a JSON object).
	JSON map[string]any
	// At is when it arrived.
	At time.Time
}

// ToolNames lists the names of the tools the request offers the model
// (Anthropic tools[].name; OpenAI tools[].name, or the type of a built-in
// tool without a name). The tools of an OpenAI namespace (Codex offers
// each MCP server's tools as one: "mcp__roombridge") are listed after it
// as NAMESPACE__TOOL.
func (r Request) ToolNames() []string {
	tools, _ := r.JSON["tools"].([]any)
	return toolNames("", tools)
}

func toolNames(prefix string, tools []any) []string {
	var names []string
	for _, t := range tools {
		m, _ := t.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			name, _ = m["type"].(string)
		}
		names = append(names, prefix+name)
		if nested, ok := m["tools"].([]any); ok {
			names = append(names, toolNames(prefix+name+"__", nested)...)
		}
	}
	return names
}

// HasTool reports whether the request offers the model a tool named name.
func (r Request) HasTool(name string) bool { return slices.Contains(r.ToolNames(), name) }

// Stream reports whether the request asks for a streamed answer.
func (r Request) Stream() bool { b, _ := r.JSON["stream"].(bool); return b }

// ToolCall is a tool the model calls in a reply.
type ToolCall struct {
	ID   string
	Name string
	// Namespace is the OpenAI namespace of the tool ("mcp__roombridge"
	// for a Codex MCP server's tool).
	Namespace string
	Input     any // marshalled to JSON
}

// Reply is the model's answer to one request.
type Reply struct {
	// Status, when not 0 or 200, answers with that HTTP status and Error
	// as the body (a JSON error object of the API, written by the test).
	Status int
	Error  string
	// RetryAfter, if set, is sent as the Retry-After header (seconds).
	RetryAfter string
	// Text is the model's text; Tools the tools it calls after it.
	Text  string
	Tools []ToolCall
	// Drop ends the stream after the first part of Text, without the
	// events that complete the message (the connection closes mid-answer).
	Drop bool
}

// Text is a reply that only says s.
func Text(s string) Reply { return Reply{Text: s} }

// Call is a reply that calls one tool.
func Call(id, name string, input any) Reply {
	return Reply{Tools: []ToolCall{{ID: id, Name: name, Input: input}}}
}

// Script decides the reply to each request; n counts the requests so far
// that the script was asked about (0 for the first).
type Script func(n int, r Request) Reply

// Server is a running fake model API.
type Server struct {
	*httptest.Server
	script Script
	write  func(w http.ResponseWriter, r Request, rep Reply)

	mu     sync.Mutex
	reqs   []Request
	change chan struct{}
}

func start(t testing.TB, script Script, write func(http.ResponseWriter, Request, Reply), route func(*Server, http.ResponseWriter, Request) bool) *Server {
	s := &Server{script: script, write: write, change: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		body, _ := io.ReadAll(hr.Body)
		r := Request{Path: hr.URL.Path, Header: hr.Header.Clone(), Body: body, At: time.Now()}
		_ = json.Unmarshal(body, &r.JSON)
		if route(s, w, r) {
			return
		}
		s.mu.Lock()
		n := len(s.reqs)
		s.reqs = append(s.reqs, r)
		close(s.change)
		s.change = make(chan struct{})
		s.mu.Unlock()
		rep := s.script(n, r)
		if rep.Status != 0 && rep.Status != http.StatusOK {
			writeError(w, rep)
			return
		}
		s.write(w, r, rep)
	}))
	t.Cleanup(s.Close)
	return s
}

// Requests returns the scripted requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// WaitRequests waits until at least n scripted requests arrived (or the
// deadline passed) and returns them.
func (s *Server) WaitRequests(n int, d time.Duration) []Request {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		reqs, ch := slices.Clone(s.reqs), s.change
		s.mu.Unlock()
		if len(reqs) >= n {
			return reqs
		}
		select {
		case <-ch:
		case <-deadline:
			return reqs
		}
	}
}

func writeError(w http.ResponseWriter, rep Reply) {
	w.Header().Set("Content-Type", "application/json")
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Error)
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, data any) {
	b, _ := json.Marshal(data)
	_, _ = io.WriteString(s.w, "event: "+name+"\ndata: "+string(b)+"\n\n")
	if s.f != nil {
		s.f.Flush()
	}
}

// drop cuts the connection mid-stream (the client sees an unexpected EOF).
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// half is the first half of s (runes), what a dropped stream got out.
func half(s string) string {
	r := []rune(s)
	return string(r[:len(r)/2])
}

func inputJSON(v any) string {
	if v == nil {
		return "{}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Has reports whether the request's body holds s (a prompt's words, a
// tool's output).
func (r Request) Has(s string) bool { return strings.Contains(string(r.Body), s) }

// ToolResult is the output of the last tool result the request carries
// (Anthropic: a tool_result block of the last user message; OpenAI: the
// last function_call_output item of the input), and whether it has one.
func (r Request) ToolResult() (string, bool) {
	if msgs, ok := r.JSON["messages"].([]any); ok && len(msgs) > 0 {
		last, _ := msgs[len(msgs)-1].(map[string]any)
		blocks, _ := last["content"].([]any)
		for i := len(blocks) - 1; i >= 0; i-- {
			b, _ := blocks[i].(map[string]any)
			if b["type"] == "tool_result" {
				return flatten(b["content"]), true
			}
		}
		return "", false
	}
	items, _ := r.JSON["input"].([]any)
	for i := len(items) - 1; i >= 0; i-- {
		it, _ := items[i].(map[string]any)
		switch it["type"] {
		case "function_call_output", "custom_tool_call_output", "mcp_tool_call_output":
			return flatten(it["output"]), true
		case "message":
			if it["role"] == "user" {
				return "", false
			}
		}
	}
	return "", false
}

// flatten is the text of a tool result's content (a string, or blocks).
func flatten(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, x := range c {
			m, _ := x.(map[string]any)
			if t, ok := m["text"].(string); ok {
				b.WriteString(t)
			}
		}
		return b.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}
