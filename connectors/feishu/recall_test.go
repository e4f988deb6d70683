package feishu_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/requests"
)

// recallEvent is an im.message.recalled_v1 event of message msg in the
// room's chat, as Feishu's documentation gives it (schema 2.0; the SDK's
// larkim.P2MessageRecalledV1).
func (h *harness) recallEvent(msg string) []byte {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	b, err := json.Marshal(map[string]any{
		"schema": "2.0",
		"header": map[string]string{"event_id": h.eventID(), "event_type": "im.message.recalled_v1", "create_time": now,
			"token": vtoken, "app_id": h.appID, "tenant_key": "tenant"},
		"event": map[string]string{"message_id": msg, "chat_id": chatID, "recall_time": now, "recall_type": "message_owner"},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// A member's ask as typed: the bot's mention taken off, another person's
// written @name and everyone's @all. Recalled before it starts, the
// request is cancelled, audited, and its topic says why; the recall
// delivered again changes nothing more.
func TestRecalledAskBeforeItStarts(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mode: mode})
			msg := h.fake.AddUserMessage(chatID, member, "@_user_1 coder say hi @_user_2 and @_all", "")
			h.deliver(feishutest.MessageEvent{EventID: h.eventID(), Token: vtoken, AppID: h.appID, SenderOpenID: member,
				ChatID: chatID, MessageID: msg, Text: "@_user_1 coder say hi @_user_2 and @_all",
				Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: h.fake.BotOpenID(), Name: "roombridge"},
					{Key: "@_user_2", OpenID: "ou_ann", Name: "Ann"}}}.JSON())
			h.waitStore("the request pending", func() bool { return len(h.requests()) == 1 })
			r := h.requests()[0]
			if r.State != requests.Pending || r.Ask != "say hi @Ann and @all" {
				t.Fatalf("request %s asks %q, want pending and the text as typed", r.State, r.Ask)
			}

			recall := h.recallEvent(msg)
			h.deliver(recall)
			h.deliver(recall)
			h.waitStore("the request cancelled, its topic told", func() bool {
				rs := h.requests()
				if len(rs) != 1 || rs[0].State != requests.Cancelled || len(h.parents(r.ID.String())) != 1 {
					return false
				}
				for _, m := range h.fake.Thread(h.parents(r.ID.String())[0].ID) {
					if strings.Contains(texts(m.Content), "cancelled: its ask was deleted") {
						return true
					}
				}
				return false
			})
			recs, err := audit.List(h.ctx(), h.db, audit.Query{RequestID: r.ID.String()}, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, rec := range recs {
				if rec.To == "cancelled" {
					n++
					if rec.Actor != "system:feishu" || rec.Detail != "its ask was deleted" {
						t.Errorf("the cancel recorded as %+v", rec)
					}
				}
			}
			if n != 1 {
				t.Errorf("%d cancel records, want 1", n)
			}
		})
	}
}
