package feishu_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/requests"
)

// A command the core answers after the ack budget ran out is answered with
// an error, and Feishu pushes it again: the re-push is answered 200 without
// running the command again, and the asker is told its answer once ("R-07
// cancelled", not then "R-07 has already ended"), with no refusal audited.
// So too when the re-push comes to a new instance on the same store (a
// restart), and when the late answer's notice failed to send: the re-push
// tells it then.
func TestLateCommandIsToldOnce(t *testing.T) {
	for _, mode := range modes {
		for _, c := range []struct {
			name              string
			restart, failSend bool
		}{
			{"cancel", false, false},
			{"cancel after a restart", true, false},
			{"the late notice failed", false, true},
		} {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				h, release := stuckHarness(t, mode, func(ev chat.Event) bool { return strings.HasPrefix(ev.Text, "cancel ") }, nil)
				h.deliverUntilOK(h.askEvent(member, "coder echo hello"))
				rid := h.requests()[0].ID
				id := rid.String()

				msg := h.fake.AddUserMessage(chatID, member, "@roombridge cancel "+id, "")
				body := feishutest.MessageEvent{EventID: h.eventID(), Token: vtoken, AppID: h.appID, SenderOpenID: member,
					ChatID: chatID, MessageID: msg, Text: "@_user_1 cancel " + id,
					Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: h.fake.BotOpenID()}}}.JSON()
				code, frame, _ := h.send(body)
				if code == http.StatusOK {
					t.Fatal("the held command was acknowledged before the core answered")
				}
				if c.failSend {
					h.fake.FailNext("/open-apis/im/v1/messages/"+msg+"/reply", http.StatusInternalServerError, 1, 0)
				}
				notices := func() []feishutest.Message {
					var out []feishutest.Message
					for _, m := range h.fake.Messages() {
						if m.ParentID == msg {
							out = append(out, m)
						}
					}
					return out
				}
				release()
				if c.failSend {
					h.waitUntil("the late notice to fail", func() bool { return strings.Contains(h.logs.String(), "notice not sent") })
				} else {
					h.waitFake("the late notice", func() bool { return len(notices()) > 0 })
				}
				if c.restart {
					h.bridge.Stop()
					h.start()
				}
				h.redeliverUntilOK(body, frame)
				r, err := h.svc.Get(h.ctx(), rid)
				if err != nil || r.State != requests.Cancelled {
					t.Errorf("%s: %+v (%v), want it cancelled", id, r, err)
				}
				recs, err := audit.List(h.ctx(), h.db, audit.Query{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if strings.HasSuffix(r.Action, "_refused") {
						t.Errorf("a refusal was audited: %+v", r)
					}
				}
				h.bridge.Stop() // waits for the notices under way

				var told []string
				for _, n := range notices() {
					told = append(told, texts(n.Content))
				}
				if len(told) != 1 || !strings.Contains(told[0], id+" cancelled") {
					t.Errorf("the asker was told %q, want once %q", told, id+" cancelled")
				}
			})
		}
	}
}
