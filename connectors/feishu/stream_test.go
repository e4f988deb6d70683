package feishu_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/requests"
)

const streamAsk = "coder stream 1s alpha beta gamma delta epsilon; tool build 50ms"

// doneAnswer waits for the one request to settle and returns its answer.
func (h *harness) doneAnswer() string {
	h.t.Helper()
	h.waitStore("the request settled", h.settled(1))
	rs := h.requests()
	if rs[0].State != requests.Done {
		h.t.Fatalf("request %s: %s", rs[0].State, rs[0].Reason)
	}
	return rs[0].Result
}

// liveCard returns the card entity of the one reply that carries one.
func (h *harness) liveCard() (feishutest.Card, int) {
	h.t.Helper()
	var card feishutest.Card
	n := 0
	for _, m := range h.fake.Messages() {
		var c struct {
			Type string `json:"type"`
			Data struct {
				CardID string `json:"card_id"`
			} `json:"data"`
		}
		if json.Unmarshal(m.Content, &c) == nil && c.Type == "card" {
			n++
			card, _ = h.fake.Card(c.Data.CardID)
		}
	}
	return card, n
}

// TestStreamCardKit: the answer is streamed into a CardKit card in the
// topic (at most 5 calls a second on it, sequence increasing, which the
// fake enforces), the tool is on the card's timeline, streaming is closed
// at the end with the stored answer as the card's text, and the answer is
// not posted a second time.
func TestStreamCardKit(t *testing.T) {
	h := newHarness(t, setup{mode: feishu.ModeCallback})
	h.deliver(h.askEvent(owner, streamAsk))
	answer := h.doneAnswer()
	card, n := h.liveCard()
	if n != 1 {
		t.Fatalf("%d card entity messages, want 1", n)
	}
	if card.Streaming || card.Elements["answer"] != answer || !strings.Contains(card.Elements["tools"], "build: complete") {
		t.Errorf("card: streaming %v, elements %q; want closed, the answer %q, build complete", card.Streaming, card.Elements, answer)
	}
	for i := range card.Ops {
		n := 0
		for j := i; j < len(card.Ops) && card.Ops[j].Sub(card.Ops[i]) < time.Second; j++ {
			n++
		}
		if n > 5 {
			t.Errorf("%d calls on the card within a second from op %d, want at most 5", n, i)
		}
	}
	for _, m := range h.fake.Messages() {
		if m.ParentID != "" && strings.Contains(string(m.Content), "alpha beta") { // a reply, not the parent's ask
			t.Errorf("the answer was also posted: %s", m.Content)
		}
	}
	if h.fake.RateLimited() != 0 {
		t.Errorf("%d calls rate limited", h.fake.RateLimited())
	}
}

// TestStreamCardKitRefusedFallsBackToPatch: without cardkit:card:write the
// live message is a card reply PATCHed as the answer is written, ending
// with exactly the stored answer, posted once.
func TestStreamCardKitRefusedFallsBackToPatch(t *testing.T) {
	h := newHarness(t, setup{mode: feishu.ModeCallback, fake: []feishutest.Option{feishutest.WithoutCardKit()}})
	h.deliver(h.askEvent(owner, streamAsk))
	answer := h.doneAnswer()
	var live []feishutest.Message
	for _, m := range h.fake.Messages() {
		if m.ParentID != "" && (strings.Contains(string(m.Current), "alpha") || strings.Contains(string(m.Content), "alpha")) {
			live = append(live, m)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d messages with the answer, want one: %+v", len(live), live)
	}
	if got := texts(live[0].Current); !strings.Contains(got, answer) || len(live[0].Patches) < 2 {
		t.Errorf("live card %q after %d patches, want the answer %q", got, len(live[0].Patches), answer)
	}
}
