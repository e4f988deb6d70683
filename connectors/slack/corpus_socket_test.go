package slack

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// The recorded Socket Mode frames (testdata/platforms/slack/socket) through
// the connector's Socket Mode path end to end: the fake writes each frame as
// recorded to the real slack-go client of a running connector; an envelope
// must be acknowledged after the core got what it carries (or nothing, for
// what is not the bridge's), and a disconnect must make the client connect
// again.

// socketRecorder is the core: it records the events it is handed.
type socketRecorder struct {
	mu  sync.Mutex
	evs []chat.Event
}

func (r *socketRecorder) Handle(_ context.Context, ev chat.Event) chat.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return chat.Response{}
}

func (r *socketRecorder) events() []chat.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// socketConnector runs a Socket Mode connector against fake until the test
// ends and waits for its connection.
func socketConnector(t *testing.T, fake *slacktest.Server) *socketRecorder {
	t.Helper()
	c, err := New(Options{Mode: ModeSocket, BotToken: slacktest.DefaultBotToken, AppToken: slacktest.DefaultAppToken,
		APIURL: fake.APIURL(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := &socketRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, rec); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitSocket(t, fake, "a connection", func(s *slacktest.Server) bool { return s.Connections() > 0 })
	return rec
}

func waitSocket(t *testing.T, fake *slacktest.Server, what string, cond func(*slacktest.Server) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fake.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// socketControl are the frames TestCorpusSocketControlFrames pushes.
var socketControl = []string{"hello.json", "slash_commands_create_pr.json", "disconnect.json"}

func TestCorpusSocketFrames(t *testing.T) {
	// The fake's bot is slacktest.BotUserID, so the recorded mention
	// (<@U01JKSB8T7Y>) is of someone else: written as slack:<id>.
	covered := map[string]bool{}
	for _, name := range socketControl {
		covered[name] = true
	}
	defer func() {
		for _, name := range corpusFiles(t, "socket") {
			if !covered[name[len("socket/"):]] {
				t.Errorf("corpus frame %s is pushed by no test", name)
			}
		}
	}()
	mention := chat.Event{Kind: chat.Ask, Surface: chat.Slack, ID: "Ev01JZ2T7S3U", Channel: "redacted",
		User: "slack:redacted", Text: "slack:U01JKSB8T7Y test", Message: "1610927831.000200"}
	for _, tc := range []struct {
		file   string
		events []chat.Event // what the core gets before the envelope is acknowledged
	}{
		{"events_api_app_mention.json", []chat.Event{mention}},
		// Not the bridge's: acknowledged, nothing for the core.
		{"events_api_function_executed.json", nil},
		{"interactive_view_submission.json", nil},
		{"slash_commands_create_pr.json", nil},
		{"slash_commands_context_bar.json", nil},
	} {
		covered[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			frame, err := os.ReadFile(filepath.Join(corpusDir, "socket", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			fake := slacktest.NewServer()
			defer fake.Close()
			rec := socketConnector(t, fake)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			id, err := fake.PushFrame(ctx, frame)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fake.WaitAck(ctx, id); err != nil {
				t.Fatal(err)
			}
			if got := rec.events(); !slices.EqualFunc(got, tc.events, eventsEqual) {
				t.Fatalf("events:\n got %s\nwant %s", show(got), show(tc.events))
			}
		})
	}
}

// TestCorpusSocketControlFrames: after the recorded hello the connection
// goes on (a later envelope is acknowledged on it); after the recorded
// disconnect the client connects again.
func TestCorpusSocketControlFrames(t *testing.T) {
	fake := slacktest.NewServer()
	defer fake.Close()
	socketConnector(t, fake)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range socketControl {
		frame, err := os.ReadFile(filepath.Join(corpusDir, "socket", name))
		if err != nil {
			t.Fatal(err)
		}
		if n := fake.Connects(); n != 1 {
			t.Fatalf("before %s: %d connections, want 1", name, n)
		}
		id, err := fake.PushFrame(ctx, frame)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if id != "" {
			if _, err := fake.WaitAck(ctx, id); err != nil {
				t.Fatalf("%s after hello: %v", name, err)
			}
		}
	}
	waitSocket(t, fake, "a new connection after the disconnect", func(s *slacktest.Server) bool {
		return s.Connects() >= 2 && s.Connections() > 0
	})
}
