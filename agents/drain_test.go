package agents_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/requests"
)

// TestDrain: Drain (a graceful shutdown) lets a turn in a tool run to the
// tool's end and interrupts it there (the safe point), interrupts a turn
// outside any tool at once, starts nothing new, and Run returns once the
// turns have stopped; their requests stay running and the next scheduler
// resumes them, while the queued one starts only then.
func TestDrain(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	work, more := filepath.Join(dir, "work"), filepath.Join(dir, "more")
	s := agents.NewScheduler(e.svc, e.th, nil,
		agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	inTool := e.ask(alice, "coder", fmt.Sprintf("tool work %s; tool more %s; echo finished", work, more))
	queued := e.ask(alice, "coder", "echo later")
	outside := e.ask(alice, "reviewer", "sleep 30s; echo slept")
	e.waitFor(inTool.ID, "in its tool", func(r *requests.Request) bool { return r.Activity == "work" })
	e.waitLog("session " + outside.ID.String() + " " + e.waitFor(outside.ID, "with a session", func(r *requests.Request) bool { return r.Session != "" }).Session)
	reviewer := agentPID(t, e, outside.ID.String())

	s.Drain()
	// The reviewer, outside any tool, is interrupted at once; the coder's
	// turn goes on until its tool ends.
	deadline := time.Now().Add(10 * time.Second)
	for alive(reviewer) {
		if time.Now().After(deadline) {
			t.Fatal("the agent outside any tool still runs 10s after the drain began")
		}
		time.Sleep(5 * time.Millisecond) // a polling tick
	}
	select {
	case <-done:
		t.Fatal("Run returned while a turn was in its tool")
	default:
	}
	if err := os.WriteFile(work, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after the tool ended")
	}
	e.waitLog("tool end " + inTool.ID.String() + " work")
	for _, c := range []struct {
		r    *requests.Request
		want requests.State
	}{{inTool, requests.Running}, {outside, requests.Running}, {queued, requests.Approved}} {
		if cur, _ := e.svc.Get(e.ctx, c.r.ID); cur.State != c.want {
			t.Errorf("%s after the drain: %s, want %s", c.r.ID, cur.State, c.want)
		}
	}

	if err := os.WriteFile(more, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	for _, r := range []*requests.Request{inTool, queued} {
		if got := e.waitState(r.ID, requests.Done); r == inTool && got.Result != "finished" {
			t.Errorf("resumed: %q", got.Result)
		}
	}
	if !e.hasAudit(inTool.ID, "interrupted", "") || !e.hasAudit(inTool.ID, "resume", "") {
		t.Errorf("audit:\n%s", e.auditText(inTool.ID))
	}
}
