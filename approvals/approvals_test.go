package approvals_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// A non-owner's request gets an approval in the transaction that creates it:
// a card with Approve and Deny in the request's thread and in the direct
// messages of the room's approvers on every surface with a connector.
func TestPendingRequestGetsApprovalAndCards(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy the backend")
	if r.State != requests.Pending {
		t.Fatalf("state %s, want pending", r.State)
	}
	a := e.approval(r.ID.String())
	if a.Kind != approvals.KindRequest || a.State != approvals.Pending || a.Version != 1 ||
		!a.ExpiresAt.Equal(t0.Add(24*time.Hour)) || a.Action != "deploy the backend" || a.Requester != member {
		t.Fatalf("approval %+v", a)
	}
	posts := e.cardEffects(a.ID, threads.OpReply)
	dms := e.cardEffects(a.ID, threads.OpDirect)
	if len(posts) != 1 || posts[0].Surface != chat.Slack || posts[0].Save != "approval/"+a.ID+"/thread" {
		t.Fatalf("thread card: %+v", posts)
	}
	if len(dms) != 2 || dms[0].User != "UAPPROVER" || dms[1].Surface != chat.Feishu || dms[1].User != "ou_approver" {
		t.Fatalf("approver DMs: %+v", dms)
	}
	card := posts[0].Message.Card
	if card.BlockID != "approval:"+a.ID+":1" || len(card.Buttons) != 2 ||
		card.Buttons[0] != (chat.Button{ActionID: "approve", Label: "Approve", Value: a.ID, Style: "primary"}) ||
		card.Buttons[1].ActionID != "deny" || card.Buttons[1].Value != a.ID {
		t.Fatalf("card %+v", card)
	}
	if len(a.Copies) != 3 {
		t.Fatalf("copies %+v, want thread + 2 DMs", a.Copies)
	}
	// An owner's request needs no approval.
	o := e.ask(owner, "backend", "fix it")
	if _, err := e.appr.Get(e.ctx, o.ID.String()); !errors.Is(err, approvals.ErrUnknown) {
		t.Fatalf("owner's request has an approval: %v", err)
	}
	if _, err := e.appr.Decide(e.ctx, o.ID.String(), approvals.Approve, owner, chat.Slack); !errors.Is(err, approvals.ErrUnknown) ||
		!strings.Contains(err.Error(), "did not wait for approval (asked by slack:UOWNER, now approved)") {
		t.Fatalf("approving an owner's request: %v", err)
	}
}

// At TTL minus one second a sweep leaves the approval pending; one second
// after the TTL a sweep expires it (the request is expired, never denied),
// updates every copy of the card and audits it as system:ttl.
func TestSweepAtTTLBoundary(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy the backend")
	id := r.ID.String()

	e.clk.Set(t0.Add(24*time.Hour - time.Second))
	if res := e.sweepOnce(); res.Expired != 0 || res.Due != 0 {
		t.Fatalf("sweep at TTL-1s: %+v, want nothing due", res)
	}
	if a := e.approval(id); a.State != approvals.Pending {
		t.Fatalf("at TTL-1s: %s", a.State)
	}
	if len(e.cardEffects(id, threads.OpUpdate)) != 0 {
		t.Fatal("card updated before expiry")
	}

	e.clk.Set(t0.Add(24*time.Hour + time.Second))
	if res := e.sweepOnce(); res.Expired != 1 || res.Failed != 0 {
		t.Fatalf("sweep at TTL+1s: %+v, want 1 expired", res)
	}
	a := e.approval(id)
	if a.State != approvals.Expired || a.DecidedBy != approvals.ActorTTL || a.Version != 2 {
		t.Fatalf("approval after expiry: %+v", a)
	}
	req := e.request(r.ID)
	if req.State != requests.Expired || req.Reason != "not approved within 24 h" {
		t.Fatalf("request after expiry: %s (%s)", req.State, req.Reason)
	}
	updates := e.cardEffects(id, threads.OpUpdate)
	if len(updates) != 3 {
		t.Fatalf("card updates %+v, want one per copy (thread + 2 DMs)", updates)
	}
	want := "expired after 24 h — retry " + id + " to ask again" // the next day: R-01 would mean today's
	for _, u := range updates {
		if u.Message.Card.Status != want || len(u.Message.Card.Buttons) != 0 || u.Message.Card.BlockID != "approval:"+id+":2" {
			t.Fatalf("updated card %+v, want status %q and no buttons", u.Message.Card, want)
		}
	}
	recs := e.auditOf(r.ID)
	if count(recs, "expire") != 1 || count(recs, "deny", "approve") != 0 {
		t.Fatalf("audit %+v, want one expire and no decision", recs)
	}
	for _, rec := range recs {
		if rec.Action == "expire" && (rec.Actor != "system:ttl" || rec.From != "pending" || rec.To != "expired") {
			t.Fatalf("expire record %+v", rec)
		}
	}
	// A second sweep finds nothing: the timer went with the expiry.
	if res := e.sweepOnce(); res.Due != 0 {
		t.Fatalf("second sweep %+v", res)
	}
	// A late approve is refused, naming the expiry.
	_, err := e.appr.Decide(e.ctx, id, approvals.Approve, owner, chat.Slack)
	if !errors.Is(err, approvals.ErrDecided) || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("late approve: %v", err)
	}
}

// A room's approval_ttl overrides the global TTL, and the card says so; a
// same-day expiry names the request in its short form.
func TestRoomTTLOverride(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "quick", "restart")
	e.clk.Set(t0.Add(90*time.Minute - time.Second))
	if res := e.sweepOnce(); res.Expired != 0 {
		t.Fatalf("%+v", res)
	}
	e.clk.Set(t0.Add(90 * time.Minute))
	if res := e.sweepOnce(); res.Expired != 1 {
		t.Fatalf("%+v", res)
	}
	us := e.cardEffects(r.ID.String(), threads.OpUpdate)
	if len(us) != 1 || us[0].Message.Card.Status != "expired after 90 min — retry R-01 to ask again" {
		t.Fatalf("%+v", us)
	}
}

// A decision that arrives after the TTL, before the sweeper came by, expires
// the approval then and there and is refused.
func TestLateDecisionExpiresLazily(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy")
	e.clk.Set(t0.Add(24 * time.Hour))
	_, err := e.appr.Decide(e.ctx, r.ID.String(), approvals.Approve, owner, chat.Slack)
	if !errors.Is(err, approvals.ErrDecided) || !strings.Contains(err.Error(), "nobody decided within 24 h") {
		t.Fatalf("late approve: %v", err)
	}
	if got := e.request(r.ID).State; got != requests.Expired {
		t.Fatalf("request %s, want expired", got)
	}
	recs := e.auditOf(r.ID)
	if count(recs, "expire") != 1 || count(recs, "approve") != 0 || count(recs, "decision_refused") != 1 {
		t.Fatalf("audit %+v", recs)
	}
	if res := e.sweepOnce(); res.Due != 0 {
		t.Fatalf("sweep after lazy expiry: %+v", res)
	}
}

// Approve, then the same approve replayed (a platform retry or a second
// click): a no-op success. A conflicting deny is refused naming who decided
// and when. Deny moves a request to cancelled, "denied by X".
func TestDecideReplayConflictAndDeny(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy")
	id := r.ID.String()
	e.clk.Advance(2*time.Hour + 2*time.Minute) // 12:02
	a, err := e.appr.Decide(e.ctx, "R-01", approvals.Approve, owner, chat.Slack)
	if err != nil || a.State != approvals.Approved || a.DecidedBy != owner || a.Surface != chat.Slack || a.Version != 2 {
		t.Fatalf("approve: %+v, %v", a, err)
	}
	if got := e.request(r.ID).State; got != requests.Approved {
		t.Fatalf("request %s", got)
	}
	again, err := e.appr.Decide(e.ctx, id, approvals.Approve, approver2, chat.Feishu)
	if err != nil || again.Version != 2 || again.DecidedBy != owner {
		t.Fatalf("replayed approve: %+v, %v", again, err)
	}
	_, err = e.appr.Decide(e.ctx, id, approvals.Deny, approver2, chat.Feishu)
	if !errors.Is(err, approvals.ErrDecided) || err.Error() != id+" was already approved by slack:UOWNER at 12:02 UTC" {
		t.Fatalf("conflicting deny: %v", err)
	}
	recs := e.auditOf(r.ID)
	if count(recs, "approve") != 1 || count(recs, "deny") != 0 || count(recs, "decision_refused") != 1 {
		t.Fatalf("audit %+v", recs)
	}
	if got := e.cardEffects(id, threads.OpUpdate); len(got) != 3 || got[0].Message.Card.Status != "approved by slack:UOWNER at 12:02 UTC" {
		t.Fatalf("updates %+v", got)
	}

	d := e.ask(member, "backend", "drop the database")
	a, err = e.appr.Decide(e.ctx, d.ID.String(), approvals.Deny, approver, chat.Slack)
	if err != nil || a.State != approvals.Denied {
		t.Fatalf("deny: %+v, %v", a, err)
	}
	req := e.request(d.ID)
	if req.State != requests.Cancelled || req.Reason != "denied by "+approver {
		t.Fatalf("denied request: %s (%s)", req.State, req.Reason)
	}
}

// An approve from one surface racing a deny from another: exactly one
// outcome, the loser is refused naming the winner, the audit log shows one
// decision.
func TestApproveRacesDenyAcrossSurfaces(t *testing.T) {
	e := newEnv(t)
	wins := map[approvals.State]int{}
	for i := 0; i < 25; i++ {
		r := e.ask(member, "backend", fmt.Sprintf("race %d", i))
		id := r.ID.String()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for j, d := range []struct {
			v       approvals.Verdict
			user    string
			surface string
		}{{approvals.Approve, owner, chat.Slack}, {approvals.Deny, owner2, chat.Feishu}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[j] = e.appr.Decide(e.ctx, id, d.v, d.user, d.surface)
			}()
		}
		close(start)
		wg.Wait()
		a := e.approval(id)
		wins[a.State]++
		var winner, loser error
		switch a.State {
		case approvals.Approved:
			winner, loser = errs[0], errs[1]
		case approvals.Denied:
			winner, loser = errs[1], errs[0]
		default:
			t.Fatalf("outcome %s", a.State)
		}
		if winner != nil || !errors.Is(loser, approvals.ErrDecided) ||
			!strings.Contains(loser.Error(), fmt.Sprintf("already %s by %s at ", a.State, a.DecidedBy)) {
			t.Fatalf("winner %v, loser %v", winner, loser)
		}
		recs := e.auditOf(r.ID)
		if count(recs, "approve", "deny") != 1 || count(recs, "decision_refused") != 1 {
			t.Fatalf("audit %+v, want one decision and one refusal", recs)
		}
		wantReq := map[approvals.State]requests.State{approvals.Approved: requests.Approved, approvals.Denied: requests.Cancelled}[a.State]
		if got := e.request(r.ID).State; got != wantReq {
			t.Fatalf("request %s after %s", got, a.State)
		}
	}
	t.Logf("outcomes: %v", wins)
}

// An approve racing the expiry: exactly one outcome, the loser is told,
// the audit log has either the approve or the expiry, never both.
func TestApproveRacesExpiry(t *testing.T) {
	e := newEnv(t)
	outcomes := map[requests.State]int{}
	for i := 0; i < 25; i++ {
		r := e.ask(member, "backend", fmt.Sprintf("race %d", i))
		a0 := e.approval(r.ID.String())
		e.clk.Set(a0.ExpiresAt.Add(-time.Millisecond))
		var wg sync.WaitGroup
		start := make(chan struct{})
		var decideErr, sweepErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, decideErr = e.appr.Decide(e.ctx, a0.ID, approvals.Approve, approver, chat.Slack)
		}()
		go func() {
			defer wg.Done()
			<-start
			e.clk.Set(a0.ExpiresAt.Add(time.Second))
			_, sweepErr = e.sweep.SweepOnce(e.ctx)
		}()
		close(start)
		wg.Wait()
		if sweepErr != nil {
			t.Fatal(sweepErr)
		}
		got := e.request(r.ID).State
		outcomes[got]++
		recs := e.auditOf(r.ID)
		switch got {
		case requests.Approved:
			if decideErr != nil || count(recs, "expire") != 0 || count(recs, "approve") != 1 {
				t.Fatalf("approved: decide %v, audit %+v", decideErr, recs)
			}
		case requests.Expired:
			if !errors.Is(decideErr, approvals.ErrDecided) || !strings.Contains(decideErr.Error(), "expired at") ||
				count(recs, "expire") != 1 || count(recs, "approve") != 0 {
				t.Fatalf("expired: decide %v, audit %+v", decideErr, recs)
			}
		default:
			t.Fatalf("outcome %s", got)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// A click by someone who may not approve changes nothing, tells them why,
// and is audited; so is a malformed click. A click by an approver decides.
func TestClicks(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy")
	id := r.ID.String()
	before := len(e.effects())
	click := func(user, action, value string) chat.Response {
		return e.router.Handle(e.ctx, chat.Event{Kind: chat.Click, Surface: chat.Slack, Channel: "C1", User: user,
			Click: &chat.ClickAction{BlockID: "approval:" + id + ":1", ActionID: action, Value: value}})
	}
	resp := click(stranger, "approve", id)
	if !resp.Error || !strings.Contains(resp.Text, stranger+" may not approve or deny in room backend") {
		t.Fatalf("stranger's click: %+v", resp)
	}
	resp = click(member, "deny", id) // the requester is no approver either
	if !resp.Error || !strings.Contains(resp.Text, "may not approve") {
		t.Fatalf("requester's click: %+v", resp)
	}
	resp = click(approver, "approve", "R20261129-99")
	if !resp.Error || !strings.Contains(resp.Text, "does not decide an approval") {
		t.Fatalf("mismatched click: %+v", resp)
	}
	a := e.approval(id)
	if a.State != approvals.Pending || a.Version != 1 || len(e.effects()) != before || e.request(r.ID).State != requests.Pending {
		t.Fatalf("a refused click changed something: %+v", a)
	}
	recs := e.allAudit()
	refusals := 0
	for _, rec := range recs {
		if rec.Action == "decision_refused" {
			refusals++
			if rec.Actor == stranger && !strings.Contains(rec.Detail, "may not approve") {
				t.Fatalf("refusal record %+v", rec)
			}
		}
	}
	if refusals != 3 {
		t.Fatalf("%d refusals audited, want 3: %+v", refusals, recs)
	}
	resp = click(approver, "approve", id)
	if resp.Error || resp.Text != id+" approved" {
		t.Fatalf("approver's click: %+v", resp)
	}
	// Typed commands reach the same decision: a second approver's deny is refused.
	resp = e.router.Handle(e.ctx, chat.Event{Kind: chat.Command, Surface: chat.Feishu, Channel: "oc_1", User: approver2, Text: "deny R-01"})
	if !resp.Error || !strings.Contains(resp.Text, "already approved by "+approver) {
		t.Fatalf("deny after approve: %+v", resp)
	}
}

// Revoking a user cancels their pending and queued requests, each with an
// audit record, withdraws the pending one's approval, and leaves their
// running request to finish. Only owners may revoke.
func TestRevoke(t *testing.T) {
	e := newEnv(t)
	running := e.ask(member, "backend", "long job")
	queued := e.ask(member, "backend", "next job")
	pending := e.ask(member, "backend", "waiting job")
	other := e.ask(approver, "backend", "someone else's")
	for _, id := range []requests.ID{running.ID, queued.ID} {
		if _, err := e.appr.Decide(e.ctx, id.String(), approvals.Approve, owner, chat.Slack); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.Apply(e.ctx, running.ID, requests.Change{Event: requests.Start, Actor: "system:scheduler"}); err != nil {
		t.Fatal(err)
	}

	if _, err := e.appr.Revoke(e.ctx, member, approver, chat.Slack); !errors.Is(err, approvals.ErrForbidden) {
		t.Fatalf("revoke by an approver: %v", err)
	}
	if _, err := e.appr.Revoke(e.ctx, "bob", owner, chat.Slack); !errors.Is(err, approvals.ErrBadUser) {
		t.Fatalf("revoke of a malformed user: %v", err)
	}
	if got := e.request(pending.ID).State; got != requests.Pending {
		t.Fatalf("a refused revoke changed %s to %s", pending.ID, got)
	}
	resp := e.router.Handle(e.ctx, chat.Event{Kind: chat.Command, Surface: chat.Slack, Channel: "C1", User: owner, Text: "revoke " + member})
	if resp.Error || !strings.Contains(resp.Text, "2 waiting request(s) cancelled") {
		t.Fatalf("revoke: %+v", resp)
	}
	for _, c := range []struct {
		id   requests.ID
		want requests.State
	}{{running.ID, requests.Running}, {queued.ID, requests.Cancelled}, {pending.ID, requests.Cancelled}, {other.ID, requests.Pending}} {
		r := e.request(c.id)
		if r.State != c.want || r.CancelRequested {
			t.Fatalf("%s: %s (cancel requested %v), want %s", c.id, r.State, r.CancelRequested, c.want)
		}
		if c.want == requests.Cancelled {
			if r.Reason != "access of "+member+" revoked by "+owner || count(e.auditOf(c.id), "cancel") != 1 {
				t.Fatalf("%s: reason %q, audit %+v", c.id, r.Reason, e.auditOf(c.id))
			}
		}
	}
	if a := e.approval(pending.ID.String()); a.State != approvals.Withdrawn {
		t.Fatalf("the revoked request's approval is %s", a.State)
	}
	if count(e.allAudit(), "revoke") != 1 {
		t.Fatal("the revoke itself is not audited")
	}
	// The running request still finishes.
	if _, err := e.svc.Apply(e.ctx, running.ID, requests.Change{Event: requests.Finish, Actor: "system:scheduler"}); err != nil {
		t.Fatal(err)
	}
}

// A request expired by the sweeper can be retried: a new ID with retry_of
// set, waiting for a new approval.
func TestExpiredRequestCanBeRetried(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy")
	e.clk.Set(t0.Add(25 * time.Hour))
	if res := e.sweepOnce(); res.Expired != 1 {
		t.Fatalf("%+v", res)
	}
	nr, err := e.router.Retry(e.ctx, r.ID, member, chat.Slack)
	if err != nil {
		t.Fatal(err)
	}
	if nr.ID == r.ID || nr.RetryOf != r.ID || nr.State != requests.Pending {
		t.Fatalf("retry %+v", nr)
	}
	if a := e.approval(nr.ID.String()); a.State != approvals.Pending || !a.ExpiresAt.Equal(t0.Add(49*time.Hour)) {
		t.Fatalf("retry's approval %+v", a)
	}
	if got := e.request(r.ID).State; got != requests.Expired {
		t.Fatalf("the original is %s", got)
	}
}

// The inbox lists a room's pending approvals oldest first with "n of N" and
// the request that asks; decided ones leave it.
func TestInbox(t *testing.T) {
	e := newEnv(t)
	r1 := e.ask(member, "backend", "first")
	e.clk.Advance(time.Minute)
	r2 := e.ask(approver, "backend", "second")
	e.clk.Advance(time.Minute)
	e.ask(member, "quick", "elsewhere")
	in, err := e.appr.Inbox(e.ctx, "backend")
	if err != nil {
		t.Fatal(err)
	}
	if in.Count != 2 || in.Items[0].Approval.ID != r1.ID.String() || in.Items[1].Approval.ID != r2.ID.String() ||
		in.Items[1].Position != 2 || in.Items[1].Of != 2 || in.Items[0].Asking.State != "pending" || in.Items[0].Asking.Requester != member {
		t.Fatalf("inbox %+v", in)
	}
	if _, err := e.appr.Decide(e.ctx, r1.ID.String(), approvals.Approve, owner, chat.Slack); err != nil {
		t.Fatal(err)
	}
	in, _ = e.appr.Inbox(e.ctx, "backend")
	if in.Count != 1 || in.Items[0].Approval.ID != r2.ID.String() || in.Items[0].Position != 1 {
		t.Fatalf("inbox after a decision %+v", in)
	}
	resp := e.router.Handle(e.ctx, chat.Event{Kind: chat.Command, Surface: chat.Slack, Channel: "C1", User: member, Text: "inbox"})
	if resp.Error || !strings.Contains(resp.Text, "1 of 1 · "+r2.ID.String()) || !strings.Contains(resp.Text, "type: approve "+r2.ID.String()) {
		t.Fatalf("inbox command: %q", resp.Text)
	}
	if _, err := e.appr.Inbox(e.ctx, "nope"); !errors.Is(err, approvals.ErrUnknownRoom) {
		t.Fatalf("unknown room: %v", err)
	}
}

// An agent's permission during a run: RequestApproval blocks until a
// decision (approved), an expiry ("not approved: expired", never a denial)
// or a cancel (withdrawn); the same action asked again while pending is the
// same approval.
func TestRequestApprovalMidRun(t *testing.T) {
	e := newEnv(t)
	r := e.ask(owner, "backend", "ship it")
	if _, err := e.svc.Apply(e.ctx, r.ID, requests.Change{Event: requests.Start, Actor: "system:scheduler"}); err != nil {
		t.Fatal(err)
	}
	ask := func(action string) (chan approvals.Decision, chan error) {
		dc, ec := make(chan approvals.Decision, 1), make(chan error, 1)
		go func() {
			d, err := e.appr.RequestApproval(e.ctx, r.ID.String(), action)
			dc <- d
			ec <- err
		}()
		return dc, ec
	}
	pendingIn := func(n int) func() bool {
		return func() bool {
			in, err := e.appr.Inbox(e.ctx, "backend")
			return err == nil && in.Count == n
		}
	}

	dc, ec := ask("push to production")
	waitFor(t, "the permission in the inbox", pendingIn(1))
	in, _ := e.appr.Inbox(e.ctx, "backend")
	a := in.Items[0].Approval
	if a.ID != r.ID.String()+".1" || a.Kind != approvals.KindAction || a.Asker != r.ID.String()+" · coder" || in.Items[0].Asking.State != "running" {
		t.Fatalf("permission %+v", in.Items[0])
	}
	// Asked again while pending (a resumed turn): the same approval.
	again, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: r.ID.String(), Action: "push to production"})
	if err != nil || again.ID != a.ID {
		t.Fatalf("asked again: %+v, %v", again, err)
	}
	if _, err := e.appr.Decide(e.ctx, "R-01.1", approvals.Approve, approver, chat.Slack); err != nil {
		t.Fatal(err)
	}
	if d := <-dc; <-ec != nil || !d.Approved() || d.Answer() != "approved by "+approver {
		t.Fatalf("decision %+v", d)
	}

	dc, ec = ask("drop the cache")
	waitFor(t, "the second permission", pendingIn(1))
	e.clk.Advance(24*time.Hour + time.Second)
	if res := e.sweepOnce(); res.Expired != 1 {
		t.Fatalf("%+v", res)
	}
	if d := <-dc; <-ec != nil || d.Approved() || d.State != approvals.Expired || d.Answer() != "not approved: expired" {
		t.Fatalf("decision %+v", d)
	}
	recs := e.auditOf(r.ID)
	if count(recs, "deny") != 0 || count(recs, "expire") != 1 || count(recs, "approve") != 1 || count(recs, "approval_requested") != 2 {
		t.Fatalf("audit %+v", recs)
	}
	if got := e.request(r.ID).State; got != requests.Running {
		t.Fatalf("an expired permission moved the request to %s", got)
	}
	us := e.cardEffects(r.ID.String()+".2", threads.OpUpdate)
	if len(us) == 0 || us[0].Message.Card.Status != "expired after 24 h — the agent was told: not approved" {
		t.Fatalf("card updates %+v", us)
	}

	dc, ec = ask("rewrite history")
	waitFor(t, "the third permission", pendingIn(1))
	if _, err := e.router.Cancel(e.ctx, r.ID, owner, chat.Slack); err != nil {
		t.Fatal(err)
	}
	if d := <-dc; <-ec != nil || d.State != approvals.Withdrawn || !strings.HasPrefix(d.Answer(), "not approved: withdrawn") {
		t.Fatalf("decision %+v", d)
	}

	// A request that is not running cannot ask; an empty action is refused.
	if _, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: e.ask(member, "backend", "x").ID.String(), Action: "a"}); err == nil {
		t.Fatal("a pending request asked for a permission")
	}
	if _, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: r.ID.String(), Action: "  "}); err == nil {
		t.Fatal("an empty action was accepted")
	}
	// ctx ending returns its error and leaves the approval pending.
	r2 := e.ask(owner, "backend", "second run")
	if _, err := e.svc.Apply(e.ctx, r2.ID, requests.Change{Event: requests.Start, Actor: "system:scheduler"}); err != nil {
		t.Fatal(err)
	}
	p, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: r2.ID.String(), Action: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := e.appr.Wait(ctx, p.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past its context: %v", err)
	}
	if got := e.approval(p.ID).State; got != approvals.Pending {
		t.Fatalf("after the waiter left: %s", got)
	}
}

func TestParseID(t *testing.T) {
	for in, want := range map[string]string{
		"R-07": "R20261129-07", "R20261128-123": "R20261128-123", "R-07.1": "R20261129-07.1", "R20261129-07.12": "R20261129-07.12",
	} {
		got, err := approvals.ParseID(in, t0)
		if err != nil || got != want {
			t.Errorf("ParseID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "R-7", "R-07.", "R-07.0", "R-07.01", "R-07.x", "07"} {
		if _, err := approvals.ParseID(bad, t0); !errors.Is(err, approvals.ErrBadID) {
			t.Errorf("ParseID(%q): %v, want ErrBadID", bad, err)
		}
	}
}
