package slack_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// A member's ask nobody approves expires (fake clock, one sweep); the
// request's thread gets a Retry button, and the member's click on it makes a
// new request that references the old one.
func TestRetryButtonOnExpiredCard(t *testing.T) {
	clk := clock.NewFake(time.Now().UTC())
	h := newHarness(t, fast(setup{mode: slack.ModeSocket, clock: clk}))
	h.mention(member, "coder echo deploy")
	var old *requests.Request
	h.waitStore("the pending request", func() bool {
		rs := h.requests()
		if len(rs) == 1 && rs[0].State == requests.Pending {
			old = rs[0]
		}
		return old != nil
	})
	id := old.ID.String()
	// The outbox backs off on the bridge's clock: let it settle before the
	// fake clock jumps.
	h.waitStore("the card delivered", h.outboxEmpty)

	clk.Advance(25 * time.Hour)
	if _, err := h.bridge.Sweeper().SweepOnce(h.ctx()); err != nil {
		t.Fatal(err)
	}
	var offer slacktest.Message
	h.waitFake("the Retry offer", func(s *slacktest.Server) bool {
		for _, m := range s.Messages() {
			if bytes.Contains(m.BlocksJSON, []byte(`"retry:`+id+`"`)) {
				offer = m
				return true
			}
		}
		return false
	})
	if offer.ThreadTS == "" || !hasButtons(offer) {
		t.Fatalf("offer %+v, want a reply with a button in the request's thread", offer)
	}
	// The sweep's effects in the thread, rendered when the outbox reached
	// them: the card's copy there expired, the outcome once, the parent's
	// final status, the offer once.
	h.waitStore("the expiry delivered", h.outboxEmpty)
	var outcomes, offers, cards int
	for _, m := range h.fake.Thread(channel, offer.ThreadTS) {
		switch {
		case bytes.Contains(m.BlocksJSON, []byte(`"retry:`+id+`"`)):
			offers++
		case strings.HasPrefix(m.Text, "Approval needed") && strings.Contains(m.Text, "expired after 24 h"):
			cards++
		case strings.Contains(m.Text, "expired: not approved within 24 h") && m.TS != offer.ThreadTS:
			outcomes++
		}
	}
	parent, _ := h.fake.Message(channel, offer.ThreadTS)
	if outcomes != 1 || offers != 1 || cards != 1 || !strings.Contains(parent.Text, "expired: not approved within 24 h") {
		t.Fatalf("in the thread: %d outcomes, %d offers, %d expired cards, parent %q; want one each and the parent's final status", outcomes, offers, cards, parent.Text)
	}
	h.click(slacktest.BlockActionsPayload(member, channel, offer.TS, offer.ThreadTS, "retry:"+id, "retry", id))
	h.waitStore("the retry", func() bool {
		for _, r := range h.requests() {
			if r.RetryOf == old.ID && r.Requester == "slack:"+member {
				return true
			}
		}
		return false
	})
}
