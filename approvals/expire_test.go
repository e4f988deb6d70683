package approvals_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// A swept expiry writes its thread's effects as one OpExpand effect, and
// the outbox's expansion of it queues, thread by thread, the very effects
// (same payloads, coalesce keys, order) that an expiry rendering them in
// the sweep's transaction queues; copies in other threads (an approver's
// Feishu DM) are queued at once.
func TestSweptExpiryExpandsToWhatItWouldHaveRendered(t *testing.T) {
	outbox := func(deferred bool) (raw []store.Effect, expanded map[string][]string) {
		e := newEnv(t)
		if !deferred {
			approvals.RenderInSweep(e.appr)
		}
		e.ask(member, "backend", "deploy the backend")
		e.ask(approver2, "backend", "and the frontend") // from Feishu
		e.clk.Set(t0.Add(24*time.Hour + time.Second))
		if res := e.sweepOnce(); res.Expired != 2 || res.Failed != 0 {
			t.Fatalf("sweep: %+v, want 2 expired", res)
		}
		raw = e.pendingRaw()
		e.effects() // expands
		expanded = map[string][]string{}
		for _, se := range e.pendingRaw() {
			expanded[se.Queue] = append(expanded[se.Queue], fmt.Sprintf("coalesce=%q %s", se.Coalesce, se.Payload))
		}
		return raw, expanded
	}
	raw, got := outbox(true)
	rawInline, want := outbox(false)
	var expands int
	for _, se := range raw {
		var ef threads.Effect
		if err := json.Unmarshal(se.Payload, &ef); err != nil {
			t.Fatal(err)
		}
		if ef.Op == threads.OpExpand {
			expands++
			if se.Span != 5 || ef.Expand != "approval_expired" || se.Queue != ef.Queue() {
				t.Errorf("OpExpand effect %+v (%s): want a span of 5 (card, its Slack DM copy, outcome, status, retry offer) in its thread", se, se.Payload)
			}
		}
	}
	if expands != 2 || len(raw) >= len(rawInline) {
		t.Fatalf("%d OpExpand effects among %d (rendered: %d), want one per expired request", expands, len(raw), len(rawInline))
	}
	if len(got) != len(want) {
		t.Fatalf("threads %d, want %d", len(got), len(want))
	}
	for q, w := range want {
		if g := got[q]; strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Errorf("thread %s expanded:\n%s\nwant (rendered in the sweep):\n%s", q, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	}
}

// A request that left pending some other way (approved directly) while its
// approval waited: the sweep expires the approval alone, with every copy
// of its card, and defers nothing (no OpExpand, no retry offer), the
// request still approved.
func TestSweptExpiryOfAnApprovalWhoseRequestMovedOn(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy the backend")
	if _, err := e.svc.Apply(e.ctx, r.ID, requests.Change{Event: requests.Approve, Actor: owner}); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(t0.Add(24*time.Hour + time.Second))
	if res := e.sweepOnce(); res.Expired != 1 || res.Failed != 0 {
		t.Fatalf("sweep: %+v, want the approval expired", res)
	}
	if a := e.approval(r.ID.String()); a.State != approvals.Expired {
		t.Fatalf("approval %s, want expired", a.State)
	}
	if got := e.request(r.ID); got.State != requests.Approved {
		t.Fatalf("request %s, want still approved", got.State)
	}
	for _, se := range e.pendingRaw() {
		var ef threads.Effect
		if err := json.Unmarshal(se.Payload, &ef); err != nil {
			t.Fatal(err)
		}
		if ef.Op == threads.OpExpand || ef.Message.Kind == approvals.KindRetryOffer {
			t.Fatalf("deferred or offered a retry for a request that moved on: %s", se.Payload)
		}
	}
	if n := len(e.cardEffects(r.ID.String(), threads.OpUpdate)); n != 3 {
		t.Fatalf("%d card updates, want one per copy (thread + 2 DMs)", n)
	}
}
