package slack_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// recorded returns the recorded inner event name (testdata/platforms/slack)
// changed by set, wrapped in an event_callback as Slack delivers it.
func (h *harness) recorded(name string, set func(ev map[string]any)) []byte {
	h.t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "platforms", "slack", "events", "inner", name))
	if err != nil {
		h.t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		h.t.Fatal(err)
	}
	set(ev)
	body, err := json.Marshal(map[string]any{"token": slacktest.VerificationToken, "team_id": slacktest.TeamID,
		"api_app_id": slacktest.AppID, "type": "event_callback", "event_id": h.eventID(), "event_time": 1, "event": ev,
		"authorizations": []any{map[string]any{"team_id": slacktest.TeamID, "user_id": slacktest.BotUserID, "is_bot": true}}})
	if err != nil {
		h.t.Fatal(err)
	}
	return body
}

// edit is the recorded message_changed event made the edit, by user, of
// top-level message ts to "<@bot> text".
func (h *harness) edit(user, ts, text string) []byte {
	return h.recorded("message_changed.json", func(ev map[string]any) {
		ev["channel"] = channel
		m := ev["message"].(map[string]any)
		m["user"], m["ts"], m["text"] = user, ts, "<@"+slacktest.BotUserID+"> "+text
		m["edited"].(map[string]any)["user"] = user
	})
}

// deletion is the recorded message_deleted event made the deletion of
// top-level message ts.
func (h *harness) deletion(ts string) []byte {
	return h.recorded("message_deleted.json", func(ev map[string]any) {
		ev["channel"], ev["deleted_ts"] = channel, ts
	})
}

// tsOf is the ts of the message an event_callback body carries.
func tsOf(t *testing.T, body []byte) string {
	t.Helper()
	var cb struct {
		Event struct {
			TS string `json:"ts"`
		} `json:"event"`
	}
	if err := json.Unmarshal(body, &cb); err != nil || cb.Event.TS == "" {
		t.Fatalf("no ts in %s: %v", body, err)
	}
	return cb.Event.TS
}

// audited counts the audit records of action.
func (h *harness) audited(action string) int {
	h.t.Helper()
	recs, err := audit.List(h.ctx(), h.db, audit.Query{}, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Action == action {
			n++
		}
	}
	return n
}

// repliesWith counts the replies in the thread of parent ts that contain s.
func (h *harness) repliesWith(ts, s string) int {
	n := 0
	for _, r := range h.replies(ts) {
		if strings.Contains(r, s) {
			n++
		}
	}
	return n
}

// An ask edited before it starts: the request asks the new text (escaped
// entities restored, the bot's mention and the agent's name taken off),
// the edit is audited, the thread says it and the parent and the pending
// approval card show the new text (a click on the card as it was is
// refused); the agent, once approved, works on the
// latest text. An edit delivered again after a later one is not applied
// again.
func TestEditedAskBeforeItStarts(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mode: mode})
			ts := tsOf(t, h.mention(member, "coder say first"))
			h.waitStore("the request pending, its card posted", func() bool {
				rs := h.requests()
				return len(rs) == 1 && rs[0].State == requests.Pending && h.outboxEmpty()
			})
			id := h.requests()[0].ID.String()
			parent := h.parents(id)[0]

			edit := h.edit(member, ts, "coder say second &amp; <https://x.test/b|more>")
			h.deliver(edit)
			const want, third = "say second & more (https://x.test/b)", "third"
			h.waitStore("the edit applied and shown", func() bool {
				return h.requests()[0].Ask == want && h.outboxEmpty()
			})
			if n := h.repliesWith(parent.TS, "ask was updated"); n != 1 {
				t.Errorf("%d thread notices of the update, want 1: %q", n, h.replies(parent.TS))
			}
			if n := h.audited("ask_edited"); n != 1 {
				t.Errorf("%d ask_edited records, want 1", n)
			}
			p, _ := h.fake.Message(channel, parent.TS)
			if !strings.Contains(blockTexts(t, p.BlocksJSON), "say second") {
				t.Errorf("the parent does not show the edited ask: %s", p.BlocksJSON)
			}
			var card slacktest.Message
			for _, m := range h.fake.Thread(channel, parent.TS) {
				if hasButtons(m) {
					card = m
				}
			}
			if !strings.Contains(blockTexts(t, card.BlocksJSON), "say second") || actionsBlockID(t, card) != "approval:"+id+":2" {
				t.Errorf("the approval card does not show the edited ask (a new version): %s", card.BlocksJSON)
			}

			// A click on the card as it was before the edit is refused:
			// nobody approves a text they were not shown.
			h.click(slacktest.BlockActionsPayload(owner, channel, card.TS, parent.TS, "approval:"+id+":1", "approve", id))
			h.waitFake("the stale click refused", func(s *slacktest.Server) bool {
				return slices.ContainsFunc(s.Ephemerals(), func(e slacktest.Message) bool {
					return e.User == owner && strings.Contains(e.Text, "edited after this card was shown")
				})
			})
			if r := h.requests()[0]; r.State != requests.Pending {
				t.Errorf("a stale click made the request %s", r.State)
			}

			// A second edit, then the first delivered again: it does not
			// take the ask back. The bridge restarts in between (the
			// connector's memory of answered events gone): the store's
			// dedupe key keeps it.
			h.deliver(h.edit(member, ts, "coder say "+third))
			h.waitStore("the second edit applied", func() bool { return h.requests()[0].Ask == "say "+third && h.outboxEmpty() })
			h.restart()
			h.deliver(edit)
			card, _ = h.fake.Message(channel, card.TS)
			if b := actionsBlockID(t, card); b != "approval:"+id+":3" {
				t.Errorf("the card after the second edit has block %s, want version 3", b)
			}
			h.mention(owner, "approve "+id)
			h.waitStore("the request done", func() bool {
				rs, _ := h.svc.List(h.ctx(), requests.Filter{State: requests.Done})
				return len(rs) == 1 && h.outboxEmpty()
			})
			if n := h.audited("ask_edited"); n != 2 {
				t.Errorf("%d ask_edited records after the redelivery, want 2", n)
			}
			if n := h.repliesWith(parent.TS, "ask was updated"); n != 2 {
				t.Errorf("%d thread notices of the updates after the redelivery, want 2", n)
			}
			if rs := h.replies(parent.TS); !slices.Contains(rs, third) {
				t.Errorf("the agent did not work on the edited ask: thread %q", rs)
			}
		})
	}
}

// An ask deleted before it starts cancels its request, audited, and its
// thread says why; a deletion or an edit of a message that asked nothing
// changes nothing.
func TestDeletedAskBeforeItStarts(t *testing.T) {
	h := newHarness(t, setup{mode: modes[0]})
	other, err := h.fake.AddUserMessage(channel, member, "just chatting", "")
	if err != nil {
		t.Fatal(err)
	}
	h.deliver(h.deletion(other))
	h.deliver(h.edit(member, other, "coder say hi"))
	ts := tsOf(t, h.mention(member, "coder say first"))
	h.waitStore("the request pending", func() bool { rs := h.requests(); return len(rs) == 1 && h.outboxEmpty() })
	id := h.requests()[0].ID.String()

	h.deliver(h.deletion(ts))
	h.waitStore("the request cancelled", func() bool {
		rs := h.requests()
		return len(rs) == 1 && rs[0].State == requests.Cancelled && h.outboxEmpty()
	})
	if r := h.requests()[0]; r.Reason != "its ask was deleted" {
		t.Errorf("cancelled for %q", r.Reason)
	}
	parent := h.parents(id)[0]
	if n := h.repliesWith(parent.TS, "cancelled: its ask was deleted"); n != 1 {
		t.Errorf("the thread does not say why: %q", h.replies(parent.TS))
	}
	if n := h.audited("ask_edited") + h.audited("ask_edit_not_applied"); n != 0 {
		t.Errorf("%d edit records: an edit of a message that asked nothing was followed", n)
	}
}

// After its request started, an edit of the ask is not applied and a
// deletion does not stop it: the thread says both, and both are audited.
func TestEditAndDeleteAfterTheStart(t *testing.T) {
	h := newHarness(t, setup{mode: modes[0]})
	ts := tsOf(t, h.mention(owner, "coder sleep 1m; echo late"))
	h.waitStore("the request running", func() bool {
		rs := h.requests()
		return len(rs) == 1 && rs[0].State == requests.Running && h.outboxEmpty()
	})
	id := h.requests()[0].ID.String()
	parent := h.parents(id)[0]

	h.deliver(h.edit(owner, ts, "coder echo changed"))
	h.deliver(h.deletion(ts))
	h.waitStore("both said in the thread", func() bool {
		return h.repliesWith(parent.TS, "edit of the ask was not applied") == 1 && h.repliesWith(parent.TS, "goes on") == 1
	})
	r := h.requests()[0]
	if r.State != requests.Running || r.Ask != "sleep 1m; echo late" {
		t.Errorf("request %s %q, want still running the first ask", r.State, r.Ask)
	}
	if h.audited("ask_edit_not_applied") != 1 || h.audited("ask_deleted") != 1 {
		t.Errorf("audit: %d ask_edit_not_applied, %d ask_deleted; want 1 each", h.audited("ask_edit_not_applied"), h.audited("ask_deleted"))
	}
}
