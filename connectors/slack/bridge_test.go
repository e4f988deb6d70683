package slack_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// The bridge binary wired by cmd/bridge, configured with a slack section
// pointing at the fake: in events mode its API server serves the webhooks, in
// socket mode it connects; a mention becomes a thread with the answer.
func TestBridgeBinary(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			fake := slacktest.NewServer()
			defer fake.Close()
			dir := t.TempDir()
			cfg := fmt.Sprintf(`owner: acme
owners: [slack:%s]
data_dir: ./data
slack: {mode: %s, bot_token: %s, app_token: %s, signing_secret: %s, api_url: %q, broadcast_final: true}
rooms:
  - {name: backend, slack_channel: %s, agents: [coder]}
agents:
  coder: {kind: exec, command: [%q, demo-agent]}
`, owner, mode, slacktest.DefaultBotToken, slacktest.DefaultAppToken, secret, fake.APIURL(), channel, bridgeBin)
			if err := os.WriteFile(filepath.Join(dir, "bridge.yaml"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			cmd := exec.CommandContext(ctx, bridgeBin, "run", "--config", "bridge.yaml", "--http", "127.0.0.1:0")
			cmd.Dir = dir
			var stderr syncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Signal(os.Interrupt)
				_ = cmd.Wait()
				if t.Failed() {
					t.Logf("bridge stderr:\n%s", stderr.String())
				}
			}()

			raw := "<@" + slacktest.BotUserID + "> coder echo from the binary"
			ts, err := fake.AddUserMessage(channel, owner, raw, "")
			if err != nil {
				t.Fatal(err)
			}
			body := slacktest.AppMentionEvent("EvBIN", channel, owner, raw, ts, "")
			if mode == slack.ModeEvents {
				addr := waitAddr(t, ctx, filepath.Join(dir, "data", "http.addr"))
				resp := postAccepted(t, ctx, "http://"+addr+"/slack/events", body, "application/json", func(req *http.Request) {
					slacktest.SignRequest(req, body, secret, time.Now())
				})
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("POST /slack/events: %d", resp.StatusCode)
				}
			} else if _, err := fake.PushEventsAPI(ctx, body); err != nil {
				t.Fatal(err)
			}

			var parent slacktest.Message
			err = fake.WaitFor(ctx, func(s *slacktest.Server) bool {
				for _, m := range s.Messages() {
					if m.User == slacktest.BotUserID && m.ThreadTS == "" && strings.HasSuffix(m.Text, "— done") {
						parent = m
						return len(s.Thread(channel, m.TS)) == 2
					}
				}
				return false
			})
			if err != nil {
				t.Fatalf("waiting for the thread: %v", err)
			}
			th := fake.Thread(channel, parent.TS)
			if !strings.Contains(parent.Text, " · coder · asked by <@"+owner+">") || th[1].Text != "from the binary" || !th[1].Broadcast {
				t.Errorf("thread %+v", th)
			}
			if slices.ContainsFunc(fake.Messages(), func(m slacktest.Message) bool { return m.Channel != channel }) {
				t.Errorf("messages outside the room's channel: %+v", fake.Messages())
			}
		})
	}
}

// waitAddr waits for the daemon to write its API address.
func waitAddr(t *testing.T, ctx context.Context, path string) string {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the bridge never wrote %s", path)
		}
	}
}
