package mcptools_test

import (
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation/mcptools"
)

// ask_user over MCP goes through the scheduler's dispatcher like the exec
// protocol's call: the question is opened for the token's request, the
// call blocks until a person answers, and the answer comes back with the
// question's ID and who answered. An empty question is refused (an answer
// saying why, audited), not a question.
func TestAskUserOverMCP(t *testing.T) {
	e := newEnv(t)
	ra := e.running("coder", "deploy")
	tok, _ := e.issue(ra.ID)
	cs := e.session(tok)

	type result struct {
		out mcptools.AskUserOut
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out mcptools.AskUserOut
		err := call(t, cs, "ask_user", mcptools.AskUserIn{Text: "which region?"}, &out)
		done <- result{out, err}
	}()
	var q *approvals.Approval
	deadline := time.Now().Add(10 * time.Second)
	for q == nil {
		qs, err := e.appr.OpenQuestions(e.ctx, ra.ID)
		switch {
		case err != nil:
			t.Fatal(err)
		case len(qs) == 1:
			q = qs[0]
		case time.Now().After(deadline):
			t.Fatal("no question opened within 10s")
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}
	if q.ID != ra.ID.String()+".q1" || q.Action != "which region?" {
		t.Fatalf("question %+v", q)
	}
	if _, err := e.appr.Answer(e.ctx, q.ID, "eu-west", alice, chat.Console); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.out != (mcptools.AskUserOut{Answered: true, Answer: "eu-west", Question: q.ID, From: alice}) {
		t.Fatalf("ask_user: %+v, %v", res.out, res.err)
	}

	var out mcptools.AskUserOut
	if err := call(t, cs, "ask_user", mcptools.AskUserIn{Text: "  "}, &out); err != nil || out.Answered ||
		!strings.Contains(out.Answer, "no answer") || !strings.Contains(out.Answer, "the question is empty") {
		t.Fatalf("empty question: %+v, %v", out, err)
	}
	if !hasAudit(t, e, ra.ID, "call_refused", "ask_user: ") {
		t.Fatal("a refused ask_user was not audited")
	}
}
