package slack_test

import (
	"bytes"
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
