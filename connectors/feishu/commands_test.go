package feishu_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/rooms"
)

// A mention that is a command ("@roombridge tasks", "@roombridge dismiss
// T-1") is carried out by the core, as the console's line would be, and
// its answer is a reply to the asking message; an unknown task is refused
// the same way.
func TestTasksAndDismissCommands(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mode: mode})
			command := func(user, text string) string {
				t.Helper()
				msg := h.fake.AddUserMessage(chatID, user, "@roombridge "+text, "")
				h.deliver(feishutest.MessageEvent{EventID: h.eventID(), Token: vtoken, AppID: h.appID, MessageID: msg,
					SenderOpenID: user, ChatID: chatID, Text: "@_user_1 " + text,
					Mentions: []feishutest.Mention{{Key: "@_user_1", OpenID: h.fake.BotOpenID(), Name: "roombridge"}}}.JSON())
				return msg
			}
			answered := func(what, msg, want string) {
				t.Helper()
				h.waitFake(what, func() bool {
					for _, m := range h.fake.Messages() {
						if m.ParentID == msg && strings.Contains(texts(m.Content), want) {
							return true
						}
					}
					return false
				})
			}
			answered("the empty task list", command(member, "tasks"), "no background tasks running")

			broken := filepath.Join(h.dir, "broken.sh")
			if err := os.WriteFile(broken, []byte("exit 3\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			command(owner, "coder background broken sh "+broken+"; yield on broken") // an owner: no approval
			var listed []delegation.Task
			h.waitStore("the failed task", func() bool {
				ts, err := h.del.Running(h.ctx(), "backend")
				listed = ts
				return err == nil && len(ts) == 1 && ts[0].State == delegation.TaskFailed
			})
			msg := command(member, "tasks")
			answered("the task list", msg, rooms.TasksText(listed)) // as the console shows it
			answered("the task list's failed task", msg, "0 background task(s) running, 1 failed or interrupted")

			answered("the dismissal", command(member, "dismiss T-1"),
				"task T-1 (broken) failed: exit status 3 dismissed (by feishu:"+member+")")
			answered("the refusal", command(member, "dismiss T-9"), "no such task")
			if ts, err := h.del.Running(h.ctx(), "backend"); err != nil || len(ts) != 0 {
				t.Errorf("after the dismissal: %v %v", ts, err)
			}
			if n := len(h.requests()); n != 1 {
				t.Errorf("%d requests, want 1 (the commands are no asks)", n)
			}
		})
	}
}
