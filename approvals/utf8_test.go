package approvals_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
)

// Long Chinese text, as Feishu rooms send, is cut on approval cards, in the
// inbox and in audit details at a character boundary: whatever the byte
// offset the cut falls on (pad shifts it), every card, status line, inbox
// line and audit detail is valid UTF-8 with no replacement character, and
// the cuts are marked.
func TestLongChineseStaysValidUTF8(t *testing.T) {
	long := strings.Repeat("请把飞书群里的部署流程写成文档，\n然后发给我。", 20)
	for pad := range 3 {
		text := strings.Repeat("a", pad) + long
		e := newEnv(t)
		ra, rb := e.delegatedPair()
		asked := e.ask(member, "backend", text)
		if _, err := e.appr.Decide(e.ctx, asked.ID.String(), approvals.Deny, owner, chat.Slack); err != nil {
			t.Fatal(err)
		}
		denied, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: rb.ID.String(), Action: text})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.appr.Open(e.ctx, approvals.ActionAsk{RequestID: rb.ID.String(), Action: "二" + text}); err != nil {
			t.Fatal(err)
		}
		dc, ec := e.askUser(rb.ID, text)
		q := e.openQuestions(ra.ID, 1)[0]
		box, err := e.appr.Inbox(e.ctx, "guarded")
		if err != nil || box.Count != 3 {
			t.Fatalf("pad %d: inbox %+v, %v", pad, box, err)
		}
		inbox := box.Text()
		if _, err := e.appr.Decide(e.ctx, denied.ID, approvals.Deny, approver, chat.Slack); err != nil {
			t.Fatal(err)
		}
		if _, err := e.appr.Answer(e.ctx, q.ID, text, member, chat.Slack); err != nil {
			t.Fatal(err)
		}
		if d := <-dc; <-ec != nil || !d.Answered() || d.Answer() != text {
			t.Fatalf("pad %d: the agent got %+v", pad, d)
		}
		e.clk.Advance(24 * time.Hour)
		if res := e.sweepOnce(); res.Expired != 1 {
			t.Fatalf("pad %d: sweep %+v", pad, res)
		}

		shown := map[string]string{"inbox": inbox}
		for _, ef := range e.effects() {
			m := ef.Message
			shown[ef.Save+ef.Ref+" text"] = m.Text
			if m.Card != nil {
				shown[ef.Save+ef.Ref+" card"] = m.Card.Text
				shown[ef.Save+ef.Ref+" status"] = m.Card.Status
				for _, f := range m.Card.Fields {
					shown[ef.Save+ef.Ref+" "+f.Label] += f.Value
				}
			}
		}
		for _, id := range []requests.ID{asked.ID, ra.ID, rb.ID} {
			for _, r := range e.auditOf(id) {
				shown["audit "+r.Action+" "+id.String()] += r.Detail
			}
		}
		cut := 0
		for where, s := range shown {
			// Stored text went through JSON, which turns a broken
			// character into U+FFFD: that is the trace of a bad cut.
			if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
				t.Errorf("pad %d: %s is not clean UTF-8: %q", pad, where, s)
			}
			if strings.Contains(s, "…") {
				cut++
			}
		}
		// The inbox, the question's posts and updates, the audit of the
		// ask, the permissions, the question and its answer, the expiry.
		if cut < 8 {
			t.Errorf("pad %d: only %d texts were cut: %q", pad, cut, shown)
		}
	}
}
