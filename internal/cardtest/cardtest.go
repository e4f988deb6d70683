// Package cardtest generates, from a seeded random source, the messages the bridge renders (thread
// parents and outcomes, approval and question cards in every state, retry offers, reminders, notices,
// task lists) with random text: long, CJK, emoji (joined, flags, skin tones), markdown and mrkdwn
// specials, control characters, mentions. The connectors' property tests render them and hold the
// result to each platform's published limits.
package cardtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// Gen generates messages; New(seed) makes the same ones for the same seed.
type Gen struct{ r *rand.Rand }

// New returns a generator seeded with seed.
func New(seed uint64) *Gen { return &Gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

// Check holds check to the messages of seeds 0 to 3, 100 each (the same
// 400 in every run), and fails t at the first error, naming the seed, the
// message and its kind.
func Check(t testing.TB, check func(chat.Message) error) {
	t.Helper()
	for seed := range uint64(4) {
		g := New(seed)
		for i := range 100 {
			m := g.Message()
			if err := check(m); err != nil {
				t.Fatalf("seed %d, message %d (%s): %v", seed, i, m.Kind, err)
			}
		}
	}
}

// pieces are what random text is made of.
var pieces = []string{
	"word", "The agent ", "答案", "中文字符", "日本語テキスト", "한국어", "😀", "👩‍👩‍👧‍👦", "🇯🇵", "👍🏽", "é", "e\u0301",
	"*bold*", "_it_", "~s~", "`code`", "```\nblock\n```", "> quote", "<@U123>", "<!channel>", "&amp;", "&", "<", ">",
	"[link](https://example.com)", "<https://x|y>", "slack:U0ABC", "\n", "\n\n", "\t", " ", "\"", "\\", "|", "#",
	"\x01", "\u2028", "\ufffd", "\xff", "%s", "{{x}}", "</div>", "{\"tag\":\"button\"}",
}

// Text returns random text of about n characters at most.
func (g *Gen) Text(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if g.r.IntN(8) == 0 {
			b.WriteString(strings.Repeat(pieces[g.r.IntN(len(pieces))], 1+g.r.IntN(50)))
			continue
		}
		b.WriteString(pieces[g.r.IntN(len(pieces))])
	}
	return b.String()
}

// size picks a text size: mostly short, sometimes past every limit.
func (g *Gen) size() int {
	switch g.r.IntN(10) {
	case 0:
		return 20000 + g.r.IntN(200000)
	case 1, 2:
		return 2000 + g.r.IntN(8000)
	}
	return g.r.IntN(300)
}

// Message returns a random message of one of the bridge's renderers, or a random card.
func (g *Gen) Message() chat.Message {
	switch g.r.IntN(9) {
	case 0:
		return threads.ParentWith(g.request(), threads.Extra{Asker: g.Text(g.r.IntN(40)),
			Waiting: g.Text(g.size()), Link: "https://bridge.example/r/" + g.Text(g.r.IntN(100))})
	case 1:
		return threads.Outcome(g.request())
	case 2:
		return approvals.Card(g.approval())
	case 3:
		a := g.approval()
		a.Kind = approvals.KindQuestion
		return approvals.QuestionCard(a)
	case 4:
		return approvals.RetryOffer(g.approval())
	case 5:
		return approvals.Reminder(g.approval())
	case 6:
		return chat.Message{Kind: "notice", Text: g.Text(g.size())} // notices, task lists, command answers
	}
	return g.card()
}

var requestStates = []requests.State{requests.Pending, requests.Approved, requests.Running, requests.Done,
	requests.Failed, requests.Cancelled, requests.Expired}

func (g *Gen) request() *requests.Request {
	day := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	r := &requests.Request{
		ID: requests.NewID(day, 1+g.r.IntN(10000)), Agent: g.Text(g.r.IntN(60)), Requester: "slack:U" + g.Text(g.r.IntN(30)),
		Ask: g.Text(g.size()), State: requestStates[g.r.IntN(len(requestStates))], Progress: g.r.IntN(101),
		Activity: g.Text(g.r.IntN(500)), Reason: g.Text(g.size()), Result: g.Text(g.size()),
		CancelRequested: g.r.IntN(2) == 0,
	}
	if g.r.IntN(3) == 0 {
		r.DelegatedBy = requests.NewID(day, 1+g.r.IntN(99))
	}
	return r
}

var approvalStates = []approvals.State{approvals.Pending, approvals.Approved, approvals.Denied, approvals.Expired,
	approvals.Withdrawn, approvals.Answered}

var approvalKinds = []approvals.Kind{approvals.KindRequest, approvals.KindAction, approvals.KindQuestion}

func (g *Gen) approval() *approvals.Approval {
	created := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rid := requests.NewID(created, 1+g.r.IntN(10000))
	a := &approvals.Approval{
		ID: rid.String(), Kind: approvalKinds[g.r.IntN(len(approvalKinds))], RequestID: rid, Room: g.Text(20),
		Agent: g.Text(g.r.IntN(60)), Requester: "feishu:ou_" + g.Text(g.r.IntN(30)), Action: g.Text(g.size()),
		Asker: g.Text(g.r.IntN(200)), State: approvalStates[g.r.IntN(len(approvalStates))], Version: g.r.Int64N(1 << 40),
		DecidedBy: "slack:U" + g.Text(g.r.IntN(20)), Surface: chat.Slack, DecidedAt: created.Add(time.Hour),
		Answer: g.Text(g.size()), Reason: g.Text(g.r.IntN(2000)), Created: created,
		ExpiresAt: created.Add(24 * time.Hour), TTL: 24 * time.Hour, Link: "https://bridge.example/" + g.Text(g.r.IntN(300)),
	}
	if a.Kind == approvals.KindAction {
		a.ID += fmt.Sprintf(".%d", 1+g.r.IntN(9))
	}
	if g.r.IntN(3) == 0 {
		a.Root = requests.NewID(created, 1+g.r.IntN(99))
	}
	return a
}

// card is a random card: many fields, many buttons (action IDs unique), long IDs and values.
func (g *Gen) card() chat.Message {
	c := &chat.Card{Title: g.Text(g.size()), Text: g.Text(g.size()), Status: g.Text(g.r.IntN(3000)),
		BlockID: g.Text(g.r.IntN(400))}
	for range g.r.IntN(4) * g.r.IntN(200) {
		c.Fields = append(c.Fields, chat.Field{Label: g.Text(g.r.IntN(100)), Value: g.Text(g.r.IntN(3000))})
	}
	for i := range g.r.IntN(3) * g.r.IntN(20) {
		c.Buttons = append(c.Buttons, chat.Button{ActionID: fmt.Sprintf("a%d_%s", i, g.Text(g.r.IntN(300))),
			Label: g.Text(g.r.IntN(120)), Value: g.Text(g.r.IntN(3000)), Style: []string{"", "primary", "danger", "x"}[g.r.IntN(4)],
			Confirm: g.Text(g.r.IntN(2) * g.r.IntN(600))})
	}
	return chat.Message{Request: "R20261129-07", Kind: "reply", Text: g.Text(g.r.IntN(200)), Card: c}
}
