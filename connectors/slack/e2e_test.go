package slack_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

var modes = []string{slack.ModeSocket, slack.ModeEvents}

// A request from start to end, with the fake's real limits and the
// connector's real pacing. A member's mention makes a pending request whose
// thread parent is titled with its ID; the approval card is posted in the
// thread and to the approver's DM; a click by someone who may not decide is
// refused with an ephemeral message; the approver's click (on their phone:
// the DM copy) approves, and both copies of the card are replaced by the
// outcome without buttons, and the click delivered again changes nothing;
// the agent's progress edits the parent; its message
// and the final answer are replies; the parent ends showing done.
func TestRequestEndToEnd(t *testing.T) {
	const ask = "progress 60 compiling; sleep 1500ms; say half way; echo all done"
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mode: mode})
			h.mention(member, "coder "+ask)

			var parent, card, dm slacktest.Message
			h.waitFake("the parent, the card in the thread and in the approver's DM", func(s *slacktest.Server) bool {
				parent, card, dm = slacktest.Message{}, slacktest.Message{}, slacktest.Message{}
				for _, m := range s.Messages() {
					switch {
					case m.User != slacktest.BotUserID:
					case m.Channel == channel && m.ThreadTS == "":
						parent = m
					case m.Channel == channel && hasButtons(m):
						card = m
					case m.Channel == "D"+owner && hasButtons(m):
						dm = m
					}
				}
				return parent.TS != "" && card.TS != "" && dm.TS != ""
			})
			rs := h.requests()
			if len(rs) != 1 || rs[0].State != requests.Pending || rs[0].Agent != "coder" || rs[0].Ask != ask {
				t.Fatalf("requests %+v: want one pending ask of coder, the mention and the agent's name taken off", rs[0])
			}
			id := rs[0].ID.String()
			if !strings.HasPrefix(parent.Text, id+" · coder · asked by <@"+member+"> — pending approval") {
				t.Errorf("parent %q", parent.Text)
			}
			if want := id + " · coder · asked by <@" + member + ">"; !strings.Contains(blockTexts(t, parent.BlocksJSON), want) {
				t.Errorf("parent blocks %s lack the title %q", parent.BlocksJSON, want)
			}
			if card.ThreadTS != parent.TS {
				t.Errorf("the card is not in the request's thread")
			}
			blockID := actionsBlockID(t, dm)
			if blockID != "approval:"+id+":1" || actionsBlockID(t, card) != blockID {
				t.Errorf("block_id %q, want approval:%s:1 on both copies", blockID, id)
			}

			h.click(slacktest.BlockActionsPayload(member, channel, card.TS, parent.TS, blockID, "approve", id))
			h.waitFake("the refusal, told to its clicker alone", func(s *slacktest.Server) bool {
				for _, e := range s.Ephemerals() {
					if e.User == member && e.ThreadTS == parent.TS && strings.Contains(e.Text, "may not approve") {
						return true
					}
				}
				return false
			})
			approve := slacktest.BlockActionsPayload(owner, dm.Channel, dm.TS, "", blockID, "approve", id)
			h.click(approve)
			h.click(approve) // delivered again: the same decision replayed is a no-op
			// Clicks on one card reach the core in order: once a later click
			// is refused, the copy has been handled.
			h.click(slacktest.BlockActionsPayload(member, channel, card.TS, parent.TS, blockID, "deny", id))
			h.waitFake("the second refusal", func(s *slacktest.Server) bool {
				n := 0
				for _, e := range s.Ephemerals() {
					if e.User == member {
						n++
					}
				}
				return n == 2
			})
			if es := h.fake.Ephemerals(); slices.ContainsFunc(es, func(e slacktest.Message) bool { return e.User == owner }) {
				t.Errorf("the approver was told something: %+v", es)
			}

			h.waitStore("the request to end and its effects to be delivered", func() bool {
				rs, _ := h.svc.List(h.ctx(), requests.Filter{State: requests.Done})
				return len(rs) == 1 && h.outboxEmpty()
			})
			for _, c := range []slacktest.Message{card, dm} {
				m, _ := h.fake.Message(c.Channel, c.TS)
				if hasButtons(m) || !strings.Contains(m.Text, "approved by <@"+owner+"> at ") {
					t.Errorf("card copy in %s after the decision: %q %s", c.Channel, m.Text, m.BlocksJSON)
				}
			}
			ps := h.parents(id)
			if len(ps) != 1 {
				t.Fatalf("%d parents titled %s, want 1", len(ps), id)
			}
			p := ps[0]
			if !strings.HasSuffix(p.Text, "— done") {
				t.Errorf("parent text %q does not show done", p.Text)
			}
			var statuses []string
			for _, u := range p.Updates {
				statuses = append(statuses, u.Text)
			}
			if !slices.ContainsFunc(statuses, func(s string) bool { return strings.Contains(s, "running · 60% · compiling") }) {
				t.Errorf("parent revisions %q never showed the progress", statuses)
			}
			replies := h.replies(p.TS)
			if len(replies) != 3 || !strings.HasPrefix(replies[0], "Approval needed · "+id) || !slices.Equal(replies[1:], []string{"half way", "all done"}) {
				t.Errorf("thread replies %q, want the card, \"half way\", \"all done\"", replies)
			}
			for _, m := range []string{"chat.postMessage", "chat.update"} {
				if n := h.fake.RateLimited(m); n != 0 {
					t.Errorf("%s was rate limited %d times", m, n)
				}
			}
		})
	}
}

func hasButtons(m slacktest.Message) bool {
	return slices.ContainsFunc(m.Blocks, func(b slackBlock) bool { return b.BlockType() == "actions" })
}

// actionsBlockID returns the block_id of m's actions block.
func actionsBlockID(t *testing.T, m slacktest.Message) string {
	t.Helper()
	var blocks []struct {
		Type    string `json:"type"`
		BlockID string `json:"block_id"`
	}
	if err := json.Unmarshal(m.BlocksJSON, &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Type == "actions" {
			return b.BlockID
		}
	}
	t.Fatalf("no actions block in %s", m.BlocksJSON)
	return ""
}
