package slack_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/rooms"
)

// A mention that is a command ("@bridge tasks", "@bridge dismiss T-1") is
// carried out by the core, as the console's line would be, and its answer
// is shown to the actor alone (ephemeral); an unknown task is refused the
// same way.
func TestTasksAndDismissCommands(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fast(setup{mode: mode}))
			answered := func(what, want string) {
				t.Helper()
				h.waitFake(what, func(s *slacktest.Server) bool {
					for _, e := range s.Ephemerals() {
						if e.User == member && strings.Contains(e.Text, want) {
							return true
						}
					}
					return false
				})
			}
			h.mention(member, "tasks")
			answered("the empty task list", "no background tasks running")

			broken := filepath.Join(h.dir, "broken.sh")
			if err := os.WriteFile(broken, []byte("exit 3\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			h.mention(owner, "coder background broken sh "+broken+"; yield on broken") // an owner: no approval
			var listed []delegation.Task
			h.waitStore("the failed task", func() bool {
				ts, err := h.del.Running(h.ctx(), "backend")
				listed = ts
				return err == nil && len(ts) == 1 && ts[0].State == delegation.TaskFailed
			})
			h.mention(member, "tasks")
			answered("the task list", slack.Mrkdwn(rooms.TasksText(listed), 40000)) // as the console shows it
			answered("the task list's failed task", "0 background task(s) running, 1 failed or interrupted")

			h.mention(member, "dismiss T-1")
			answered("the dismissal", slack.Mrkdwn("task T-1 (broken) failed: exit status 3 dismissed (by slack:"+member+")", 40000))
			h.mention(member, "dismiss T-9")
			answered("the refusal", "no such task")
			if ts, err := h.del.Running(h.ctx(), "backend"); err != nil || len(ts) != 0 {
				t.Errorf("after the dismissal: %v %v", ts, err)
			}
			if n := len(h.requests()); n != 1 {
				t.Errorf("%d requests, want 1 (the commands are no asks)", n)
			}
		})
	}
}
