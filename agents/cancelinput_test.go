package agents_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// TestCancelWithPendingInput: a waiting request that is cancelled while an
// input is pending for its next turn (a task's result that came just before
// the cancel) ends without another turn, and the input is reported as not delivered
// (audit and a notice in its thread), not dropped: no turn ever had it.
// (Found by cmd/bridge's TestCrashAnywhere: a delegated request whose task
// had ended was cancelled by its asker's end before it was woken.)
func TestCancelWithPendingInput(t *testing.T) {
	e := newEnv(t)
	e.start(func(s *agents.Scheduler) { s.Delegator = &delegator{e: e} },
		agents.Agent{Name: "coder", Runtime: e.exec()}, agents.Agent{Name: "reviewer", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	r := e.ask(alice, "coder", "ask reviewer tool review "+gate+"; echo x")
	e.waitFor(r.ID, "waiting", func(r *requests.Request) bool { return strings.HasPrefix(r.Activity, "waiting") })
	// The result and the cancel in one transaction: the scheduler sees
	// both at once.
	err := e.db.Update(e.ctx, func(tx store.Tx) error {
		if err := agents.DeliverTx(tx, e.svc, r.ID, agents.Input{Kind: agents.InputTaskResult, TaskID: "T-9",
			State: "succeeded", Text: "task T-9 (late) succeeded"}); err != nil {
			return err
		}
		_, err := e.svc.UpdateTx(tx, r.ID, alice, "cancel_requested", "cancelled by "+alice, func(r *requests.Request) {
			r.CancelRequested, r.Reason = true, "cancelled by "+alice
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(r.ID, requests.Cancelled)
	if !e.hasAudit(r.ID, "undelivered", "task_result arrived after the last turn: task T-9 (late) succeeded") ||
		!slices.ContainsFunc(e.replies(r.ID), func(m chat.Message) bool { return m.Kind == "notice" }) {
		t.Errorf("the result in the pending input of the cancelled request is not reported: audit:\n%s", e.auditText(r.ID))
	}
	turns := 0
	for _, l := range e.logLines() {
		if strings.HasPrefix(l, "turn "+r.ID.String()) {
			turns++
		}
	}
	if turns != 1 {
		t.Errorf("%d turns, want 1 (the cancel ends it between turns)", turns)
	}
}
