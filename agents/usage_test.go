package agents_test

import (
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// TestTurnUsage: what Claude Code's result event reports (tokens, cache,
// dollars) is summed on the request, audited with the turn, told to
// OnUsage (the metrics), and shown in the final status line; the text it
// wrote before its tool is a message in the thread (live output).
func TestTurnUsage(t *testing.T) {
	e := newEnv(t)
	f := newFakeCLI(t)
	var told []requests.Usage
	e.start(func(s *agents.Scheduler) {
		s.OnUsage = func(agent string, u requests.Usage) { told = append(told, u) }
	}, agents.Agent{Name: "coder", Runtime: &process.Runtime{Kind: process.Claude, Command: demoCommand(),
		Env: f.env("claude/partial.jsonl"), Stream: true}})
	r := e.ask(alice, "coder", "run the tests")
	got := e.waitState(r.ID, requests.Done)
	want := requests.Usage{Turns: 1, InputTokens: 12, OutputTokens: 96, CacheReadTokens: 11850, CacheWriteTokens: 4120, CostUSD: 0.0213}
	if got.Usage != want {
		t.Errorf("usage %+v, want %+v", got.Usage, want)
	}
	e.stopScheduler() // OnUsage was called before the end was recorded
	if len(told) != 1 || told[0] != want {
		t.Errorf("OnUsage told %+v, want once %+v", told, want)
	}
	if !e.hasAudit(r.ID, "usage", "input 12, output 96, cache read 11850, cache write 4120 tokens; $0.0213") {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
	got.StartedAt, got.EndedAt = time.Unix(100, 0), time.Unix(141, 0)
	if line := threads.StatusLine(got, ""); line != "done · 41 s · 16.1k tokens · $0.02" {
		t.Errorf("status %q", line)
	}
	got.Usage.Turns = 3
	if line := threads.StatusLine(got, ""); line != "done · 3 turns · 41 s · 16.1k tokens · $0.02" {
		t.Errorf("status %q", line)
	}
}
