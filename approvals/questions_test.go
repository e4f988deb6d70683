package approvals_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// delegatedPair makes RA (asked by an owner in room "guarded", running) and
// RB (delegated by RA to reviewer, running), as delegation makes them.
func (e *env) delegatedPair() (ra, rb *requests.Request) {
	e.t.Helper()
	ra, err := e.svc.Create(e.ctx, requests.Ask{Agent: "coder", Room: "guarded", Surface: chat.Slack, User: owner, Text: "ship it"})
	if err != nil {
		e.t.Fatal(err)
	}
	rb, err = e.svc.Create(e.ctx, requests.Ask{Agent: "reviewer", Room: "guarded", Surface: chat.Slack, User: owner,
		Text: "review it", DelegatedBy: ra.ID, Approved: true})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, id := range []requests.ID{ra.ID, rb.ID} {
		if _, err := e.svc.Apply(e.ctx, id, requests.Change{Event: requests.Start, Actor: "system:scheduler"}); err != nil {
			e.t.Fatal(err)
		}
	}
	return e.request(ra.ID), e.request(rb.ID)
}

// askUser runs AskUser in the background, as an agent's call does.
func (e *env) askUser(id requests.ID, question string) (chan approvals.Decision, chan error) {
	dc, ec := make(chan approvals.Decision, 1), make(chan error, 1)
	go func() {
		d, err := e.appr.AskUser(e.ctx, id.String(), question)
		dc <- d
		ec <- err
	}()
	return dc, ec
}

// openQuestion waits until thread shows n open questions and returns them.
func (e *env) openQuestions(thread requests.ID, n int) []*approvals.Approval {
	e.t.Helper()
	var qs []*approvals.Approval
	waitFor(e.t, "open questions in the thread", func() bool {
		var err error
		qs, err = e.appr.OpenQuestions(e.ctx, thread)
		return err == nil && len(qs) == n
	})
	return qs
}

// questionEffects returns the outbox effects of op that post or update a
// copy of question id.
func (e *env) questionEffects(id string, op threads.Op) []threads.Effect {
	var out []threads.Effect
	for _, ef := range e.effects() {
		name := ef.Save
		if op == threads.OpUpdate {
			name = ef.Ref
		}
		if ef.Op == op && ef.Message.Kind == "question" && hasPrefix(name, "approval/"+id+"/") {
			out = append(out, ef)
		}
	}
	return out
}

// A question of delegated work is shown in the asking request's thread and
// its root's, labelled with the asking agent and ID, and listed in both
// rooms' inboxes; a non-member's reply is refused and audited; a member's
// reply in the root's thread answers it, and the waiting call gets the
// answer; every copy says who answered; a redelivered reply and a second
// answer change nothing (the second is refused naming who answered and
// when).
func TestQuestionShownInRootThreadAnsweredByReply(t *testing.T) {
	e := newEnv(t)
	ra, rb := e.delegatedPair()
	dc, ec := e.askUser(rb.ID, "which region?")
	q := e.openQuestions(ra.ID, 1)[0]
	if q.ID != rb.ID.String()+".q1" || q.Kind != approvals.KindQuestion || q.Root != ra.ID || q.RootRoom != "guarded" {
		t.Fatalf("question %+v", q)
	}
	if own := e.openQuestions(rb.ID, 1); own[0].ID != q.ID {
		t.Fatalf("RB's thread shows %+v", own)
	}
	posts := e.questionEffects(q.ID, threads.OpReply)
	if len(posts) != 2 {
		t.Fatalf("%d posted copies, want 2 (RB's thread, RA's thread; no DMs): %+v", len(posts), posts)
	}
	want := "reviewer (R-02) asks: which region?"
	in := map[string]bool{}
	for _, p := range posts {
		in[p.Request] = true
		if !strings.HasPrefix(p.Message.Text, want+" — waiting for an answer") || p.Message.Card.Text != want ||
			p.Message.Card.Fields[0].Value != ra.ID.String() || len(p.Message.Card.Buttons) != 0 {
			t.Errorf("copy in %s: %+v %+v", p.Request, p.Message, p.Message.Card)
		}
	}
	if !in[ra.ID.String()] || !in[rb.ID.String()] {
		t.Fatalf("copies in %v, want RA's and RB's threads", in)
	}
	box, err := e.appr.Inbox(e.ctx, "guarded")
	if err != nil || box.Count != 1 || box.Items[0].Approval.ID != q.ID || box.Items[0].Asking.Label != "reviewer (R-02)" {
		t.Fatalf("inbox: %+v, %v", box, err)
	}
	if text := box.Text(); !strings.Contains(text, "reviewer (R-02) asks for "+ra.ID.String()) ||
		!strings.Contains(text, "answer "+q.ID+" <text>") {
		t.Errorf("inbox text: %q", text)
	}

	// A stranger may not answer: refused, audited, nothing changes.
	if got, err := e.appr.AnswerInThread(e.ctx, ra.ID, "us-east", stranger, chat.Slack, "slack:Ev1"); !errors.Is(err, approvals.ErrForbidden) ||
		!strings.Contains(err.Error(), stranger+" may not answer "+q.ID) {
		t.Fatalf("stranger's reply: %+v, %v", got, err)
	}
	if e.approval(q.ID).State != approvals.Pending {
		t.Fatal("a refused reply changed the question")
	}
	if n := count(e.auditOf(rb.ID), "answer_refused"); n != 1 {
		t.Fatalf("%d answer_refused records, want 1", n)
	}

	// A member's reply in RA's thread answers it.
	got, err := e.appr.AnswerInThread(e.ctx, ra.ID, "eu-west, please", member, chat.Slack, "slack:Ev2")
	if err != nil || got.ID != q.ID || got.State != approvals.Answered || got.Answer != "eu-west, please" || got.DecidedBy != member {
		t.Fatalf("member's reply: %+v, %v", got, err)
	}
	d := <-dc
	if err := <-ec; err != nil || !d.Answered() || d.Answer() != "eu-west, please" || d.By != member || d.Surface != chat.Slack {
		t.Fatalf("the agent got %+v, %v", d, err)
	}
	ups := e.questionEffects(q.ID, threads.OpUpdate)
	if len(ups) != 2 {
		t.Fatalf("%d updated copies, want 2", len(ups))
	}
	for _, u := range ups {
		if u.Message.Card.Status != "answered by "+member+" at 10:00 UTC: eu-west, please" {
			t.Errorf("updated copy: %q", u.Message.Card.Status)
		}
	}
	// The platform redelivers the same reply: nothing happens.
	if _, err := e.appr.AnswerInThread(e.ctx, rb.ID, "eu-west, please", member, chat.Slack, "slack:Ev2"); err != nil {
		t.Fatalf("redelivery after the answer: %v", err) // no question is open: a follow-up for rooms to dedupe
	}
	// Answering again, by its ID: refused naming who answered and when.
	_, err = e.appr.Answer(e.ctx, "R-02.q1", "us-east", approver, chat.Slack)
	if !errors.Is(err, approvals.ErrDecided) || err.Error() != q.ID+" was already answered by "+member+" at 10:00 UTC" {
		t.Fatalf("second answer: %v", err)
	}
	if a := e.approval(q.ID); a.Answer != "eu-west, please" || a.Version != 2 {
		t.Fatalf("after a second answer: %+v", a)
	}
	recs := e.auditOf(rb.ID)
	if count(recs, "question_asked") != 1 || count(recs, "question_answered") != 1 || count(recs, "answer_refused") != 2 {
		t.Fatalf("audit %+v", recs)
	}
	for _, r := range recs {
		if r.Action == "question_answered" && (r.Actor != member || r.Surface != chat.Slack) {
			t.Errorf("answer audited as %+v", r)
		}
	}
	if box, _ := e.appr.Inbox(e.ctx, "guarded"); box.Count != 0 {
		t.Errorf("inbox after the answer: %+v", box)
	}
}

// Answer by ID: an unknown question, an approval's ID, an empty answer are
// refused (audited); a question is not approved; several open questions in
// one thread: a reply naming one answers that one, else the oldest.
func TestAnswerRefusalsAndChoice(t *testing.T) {
	e := newEnv(t)
	ra, rb := e.delegatedPair()
	if _, err := e.appr.Answer(e.ctx, "R-02.q9", "x", owner, chat.API); !errors.Is(err, approvals.ErrUnknown) {
		t.Fatalf("unknown question: %v", err)
	}
	if _, err := e.appr.Answer(e.ctx, "R-02.x", "x", owner, chat.API); !errors.Is(err, approvals.ErrBadID) {
		t.Fatalf("malformed ID: %v", err)
	}
	e.askUser(rb.ID, "first?")
	e.openQuestions(ra.ID, 1)
	e.clk.Advance(time.Second)
	e.askUser(ra.ID, "second?")
	qs := e.openQuestions(ra.ID, 2)
	if qs[0].ID != rb.ID.String()+".q1" || qs[1].ID != ra.ID.String()+".q1" {
		t.Fatalf("open in RA's thread, oldest first: %s, %s", qs[0].ID, qs[1].ID)
	}
	if _, err := e.appr.Answer(e.ctx, qs[0].ID, "  ", owner, chat.API); !errors.Is(err, approvals.ErrBadAnswer) {
		t.Fatalf("empty answer: %v", err)
	}
	if _, err := e.appr.Decide(e.ctx, qs[0].ID, approvals.Approve, owner, chat.API); !errors.Is(err, approvals.ErrWrongKind) {
		t.Fatalf("approving a question: %v", err)
	}
	p, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: ra.ID.String(), Action: "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.appr.Answer(e.ctx, p.ID, "yes", owner, chat.API); !errors.Is(err, approvals.ErrWrongKind) {
		t.Fatalf("answering a permission: %v", err)
	}
	// A reply naming the newer question answers it, not the oldest.
	got, err := e.appr.AnswerInThread(e.ctx, ra.ID, "R-01.q1: the second answer", member, chat.Slack, "")
	if err != nil || got.ID != ra.ID.String()+".q1" || got.Answer != "the second answer" {
		t.Fatalf("named reply: %+v, %v", got, err)
	}
	got, err = e.appr.AnswerInThread(e.ctx, ra.ID, "the first answer", member, chat.Slack, "")
	if err != nil || got.ID != rb.ID.String()+".q1" || got.Answer != "the first answer" {
		t.Fatalf("plain reply: %+v, %v", got, err)
	}
	if got, err := e.appr.AnswerInThread(e.ctx, ra.ID, "a follow-up", member, chat.Slack, ""); got != nil || err != nil {
		t.Fatalf("a reply with no open question: %+v, %v", got, err)
	}
	recs := e.allAudit()
	if n := count(recs, "answer_refused"); n != 4 {
		t.Fatalf("%d answer_refused records, want 4 (unknown, malformed, empty, a permission)", n)
	}
}

// An unanswered question expires through the sweeper (fake clock): the
// agent is told "no answer: expired", never an answer; every copy says so;
// an answer after that is refused. An answer after the TTL but before the
// sweep expires it then and there. A cancel withdraws an open question.
func TestQuestionExpiresAndWithdraws(t *testing.T) {
	e := newEnv(t)
	ra, rb := e.delegatedPair()
	dc, ec := e.askUser(rb.ID, "which region?")
	q := e.openQuestions(ra.ID, 1)[0]
	if q.TTL != 24*time.Hour {
		t.Fatalf("TTL %s", q.TTL)
	}
	e.clk.Advance(24*time.Hour - time.Minute)
	if res := e.sweepOnce(); res.Expired != 0 {
		t.Fatalf("expired early: %+v", res)
	}
	e.clk.Advance(time.Minute)
	if res := e.sweepOnce(); res.Expired != 1 {
		t.Fatalf("sweep: %+v", res)
	}
	d := <-dc
	if err := <-ec; err != nil || d.Answered() || d.State != approvals.Expired || d.Answer() != "no answer: expired (nobody answered in time)" {
		t.Fatalf("the agent got %+v, %v", d, err)
	}
	a := e.approval(q.ID)
	if a.Answer != "" || a.DecidedBy != approvals.ActorTTL {
		t.Fatalf("expired question %+v", a)
	}
	ups := e.questionEffects(q.ID, threads.OpUpdate)
	if len(ups) != 2 || ups[0].Message.Card.Status != "expired after 24 h unanswered — the agent was told: no answer" {
		t.Fatalf("updates %+v", ups)
	}
	_, err := e.appr.Answer(e.ctx, q.ID, "too late", member, chat.Slack)
	if !errors.Is(err, approvals.ErrDecided) || !strings.Contains(err.Error(), "expired at 10:00 UTC: nobody answered within 24 h") {
		t.Fatalf("answer after expiry: %v", err)
	}
	recs := e.auditOf(rb.ID)
	if count(recs, "question_expired") != 1 || count(recs, "expire") != 0 || count(recs, "question_answered") != 0 {
		t.Fatalf("audit %+v", recs)
	}

	// Late: past the TTL, not yet swept.
	e.askUser(rb.ID, "second?")
	q2 := e.openQuestions(rb.ID, 1)[0]
	e.clk.Advance(25 * time.Hour)
	if _, err := e.appr.AnswerInThread(e.ctx, rb.ID, "late", member, chat.Slack, ""); !errors.Is(err, approvals.ErrDecided) {
		t.Fatalf("late answer: %v", err)
	}
	if a := e.approval(q2.ID); a.State != approvals.Expired || a.Answer != "" {
		t.Fatalf("late answer left %+v", a)
	}

	// Cancel withdraws.
	dc, ec = e.askUser(rb.ID, "third?")
	e.openQuestions(ra.ID, 1)
	if _, err := e.router.Cancel(e.ctx, rb.ID, owner, chat.Slack); err != nil {
		t.Fatal(err)
	}
	if d := <-dc; <-ec != nil || d.State != approvals.Withdrawn || !strings.HasPrefix(d.Answer(), "no answer: withdrawn (") {
		t.Fatalf("after a cancel: %+v", d)
	}
	if qs, _ := e.appr.OpenQuestions(e.ctx, ra.ID); len(qs) != 0 {
		t.Fatalf("still open in RA's thread: %+v", qs)
	}
	if n := count(e.auditOf(rb.ID), "question_withdrawn"); n != 1 {
		t.Fatalf("%d question_withdrawn records", n)
	}
}

// A permission asked by delegated work: its card is posted in the asking
// request's thread and its root's (labelled with the asker), and every copy
// (those and the approver's DM) is updated by the decision.
func TestDelegatedPermissionCardInRootThread(t *testing.T) {
	e := newEnv(t)
	ra, rb := e.delegatedPair()
	a, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: rb.ID.String(), Action: "deploy to staging"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Root != ra.ID || a.RootRoom != "guarded" {
		t.Fatalf("approval %+v", a)
	}
	posts := e.cardEffects(a.ID, threads.OpReply)
	in := map[string]bool{}
	for _, p := range posts {
		in[p.Request] = true
		if p.Message.Card.Fields[0].Value != rb.ID.String()+" · reviewer" {
			t.Errorf("copy in %s labelled %+v", p.Request, p.Message.Card.Fields)
		}
	}
	if len(posts) != 2 || !in[ra.ID.String()] || !in[rb.ID.String()] {
		t.Fatalf("copies %+v", posts)
	}
	if box, _ := e.appr.Inbox(e.ctx, "guarded"); box.Count != 1 || box.Items[0].Approval.ID != a.ID {
		t.Fatalf("root room's inbox %+v", box)
	}
	if _, err := e.appr.Decide(e.ctx, a.ID, approvals.Approve, approver, chat.Slack); err != nil {
		t.Fatal(err)
	}
	ups := e.cardEffects(a.ID, threads.OpUpdate)
	if len(ups) != len(a.Copies) || len(ups) != 3 { // the two threads' copies and the approver's DM
		t.Fatalf("%d updates for %d copies", len(ups), len(a.Copies))
	}
	for _, u := range ups {
		if !strings.HasPrefix(u.Message.Card.Status, "approved by "+approver) {
			t.Errorf("update %q", u.Message.Card.Status)
		}
	}
}

func TestParseQuestionID(t *testing.T) {
	for in, want := range map[string]string{"R-07.q1": "R20261129-07.q1", "R20261128-123.q12": "R20261128-123.q12"} {
		if got, err := approvals.ParseID(in, t0); err != nil || got != want {
			t.Errorf("ParseID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"R-07.q", "R-07.q0", "R-07.q01", "R-07.qq1", "R-07.Q1"} {
		if _, err := approvals.ParseID(bad, t0); !errors.Is(err, approvals.ErrBadID) {
			t.Errorf("ParseID(%q): %v, want ErrBadID", bad, err)
		}
	}
}
