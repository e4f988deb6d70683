package approvals_test

import (
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// kindEffects returns the outbox effects of op with message kind kind.
func (e *env) kindEffects(op threads.Op, kind string) []threads.Effect {
	var out []threads.Effect
	for _, ef := range e.effects() {
		if ef.Op == op && ef.Message.Kind == kind {
			out = append(out, ef)
		}
	}
	return out
}

func TestTimeLeft(t *testing.T) {
	for _, c := range []struct {
		d     time.Duration
		label string
		next  time.Duration
	}{
		{72 * time.Hour, "3 d", 48 * time.Hour},
		{48 * time.Hour, "48 h", 47 * time.Hour},
		{24 * time.Hour, "24 h", 23 * time.Hour},
		{23*time.Hour + time.Minute, "24 h", 23 * time.Hour},
		{2 * time.Hour, "2 h", time.Hour},
		{time.Hour, "1 h", 45 * time.Minute},
		{45 * time.Minute, "45 min", 30 * time.Minute},
		{time.Minute, "15 min", 0},
	} {
		if l, n := approvals.TimeLeft(c.d); l != c.label || n != c.next {
			t.Errorf("TimeLeft(%v) = %q, %v; want %q, %v", c.d, l, n, c.label, c.next)
		}
	}
}

// The card shows the time left and every copy is updated when the shown
// value changes (hourly, then by quarter hours); one reminder an hour
// before the expiry goes to each approver as a DM, audited, once; after a
// decision nothing more is sent.
func TestTimeLeftUpdatesAndReminders(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy the backend")
	id := r.ID.String()
	posts := e.cardEffects(id, threads.OpReply)
	if len(posts) != 1 || !strings.Contains(posts[0].Message.Card.Status, "expires in 24 h (2026-11-30 10:00 UTC)") {
		t.Fatalf("posted card %+v, want the time left", posts)
	}
	left := func() []threads.Effect { return e.kindEffects(threads.OpUpdate, approvals.KindTimeLeft) }
	reminders := func() []threads.Effect { return e.kindEffects(threads.OpDirect, approvals.KindReminder) }

	e.clk.Set(t0.Add(30 * time.Minute))
	if res := e.sweepOnce(); res.Notices != 0 || len(left()) != 0 {
		t.Fatalf("at 30 min: %+v, %d updates: the shown value did not change", res, len(left()))
	}
	e.clk.Set(t0.Add(time.Hour + time.Second))
	if res := e.sweepOnce(); res.Notices != 1 || res.Expired != 0 {
		t.Fatalf("at 1 h: %+v", res)
	}
	if ups := left(); len(ups) != 3 || !strings.Contains(ups[0].Message.Card.Status, "expires in 23 h") {
		t.Fatalf("updates %+v, want one per copy with 23 h", ups)
	}
	if len(reminders()) != 0 {
		t.Fatal("reminded a day early")
	}

	e.clk.Set(t0.Add(23 * time.Hour))
	e.sweepOnce()
	e.sweepOnce() // a second sweep at the same time sends nothing more
	rs := reminders()
	if len(rs) != 2 || rs[0].User != "UAPPROVER" || rs[1].User != "ou_approver" ||
		!strings.Contains(rs[0].Message.Text, "expires in 1 h") {
		t.Fatalf("reminders %+v, want one DM per approver", rs)
	}
	if n := count(e.auditOf(r.ID), "approval_reminded"); n != 2 {
		t.Fatalf("%d approval_reminded records, want 2", n)
	}
	e.clk.Set(t0.Add(23*time.Hour + 15*time.Minute))
	e.sweepOnce()
	if ups := left(); !strings.Contains(ups[len(ups)-1].Message.Card.Status, "expires in 45 min") {
		t.Fatalf("last update %+v, want 45 min", ups[len(ups)-1])
	}

	if _, err := e.appr.Decide(e.ctx, id, approvals.Approve, approver, chat.Slack); err != nil {
		t.Fatal(err)
	}
	before := len(left())
	e.clk.Set(t0.Add(23*time.Hour + 50*time.Minute))
	if res := e.sweepOnce(); res.Notices != 0 || res.Due != 0 || len(left()) != before || len(reminders()) != 2 {
		t.Fatalf("after the decision: %+v, %d updates (was %d), %d reminders", res, len(left()), before, len(reminders()))
	}
}

// noticeTimers are the notice timers in the store, due or not.
func (e *env) noticeTimers() []store.Timer {
	e.t.Helper()
	due, err := store.Due(e.ctx, e.db, approvals.NoticeKind, t0.AddDate(1, 0, 0), store.Timer{}, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	return due
}

// An approval settled before its reminder is never reminded of.
func TestNoReminderOnceSettled(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "backend", "deploy the backend")
	e.clk.Set(t0.Add(2 * time.Hour))
	if due := e.noticeTimers(); len(due) != 1 || e.approval(r.ID.String()).NoticeAt.IsZero() {
		t.Fatalf("pending: notice timers %v, notice_at %v", due, e.approval(r.ID.String()).NoticeAt)
	}
	if _, err := e.appr.Decide(e.ctx, r.ID.String(), approvals.Deny, approver2, chat.Feishu); err != nil {
		t.Fatal(err)
	}
	// The timer goes with the decision, and so does the record's due time
	// of it (zero: none).
	if due := e.noticeTimers(); len(due) != 0 || !e.approval(r.ID.String()).NoticeAt.IsZero() {
		t.Fatalf("denied: notice timers %v, notice_at %v", due, e.approval(r.ID.String()).NoticeAt)
	}
	e.clk.Set(t0.Add(23*time.Hour + time.Minute))
	if res := e.sweepOnce(); res.Notices != 0 {
		t.Fatalf("sweep after the decision: %+v", res)
	}
	if n := len(e.kindEffects(threads.OpDirect, approvals.KindReminder)); n != 0 || count(e.allAudit(), "approval_reminded") != 0 {
		t.Fatalf("%d reminders after the decision", n)
	}
}

// An expired request's thread gets a Retry offer; the requester's click
// makes a new request that references the old one; a stranger's is refused.
func TestRetryOfferOnExpiry(t *testing.T) {
	e := newEnv(t)
	r := e.ask(member, "guarded", "deploy the backend")
	e.clk.Set(t0.Add(24*time.Hour + time.Second))
	e.sweepOnce()
	offers := e.kindEffects(threads.OpReply, approvals.KindRetryOffer)
	if len(offers) != 1 || len(offers[0].Message.Card.Buttons) != 1 {
		t.Fatalf("offers %+v, want one with a Retry button", offers)
	}
	b := offers[0].Message.Card.Buttons[0]
	click := func(user string) chat.Response {
		return e.router.Handle(e.ctx, chat.Event{Kind: chat.Click, Surface: chat.Slack, User: user, Channel: "C3",
			ID: "click-" + user, Click: &chat.ClickAction{BlockID: offers[0].Message.Card.BlockID, ActionID: b.ActionID, Value: b.Value}})
	}
	if resp := click(stranger); !resp.Error {
		t.Fatalf("a stranger's Retry: %+v, want refused", resp)
	}
	resp := click(member)
	if resp.Error || !strings.Contains(resp.Text, "retry of "+r.ID.String()) {
		t.Fatalf("the requester's Retry: %+v", resp)
	}
	id, err := requests.ParseRef(strings.Fields(resp.Text)[0], e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n := e.request(id); n.RetryOf != r.ID || n.State != requests.Pending {
		t.Fatalf("new request %+v, want a pending retry of %s", n, r.ID)
	}
}
