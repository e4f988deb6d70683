package feishu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
)

type stopClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stopClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stopClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// longSetup starts a topic on a fake of its own through a connector that does not receive.
func longSetup(t *testing.T, opts ...feishutest.Option) (*feishutest.Server, *feishu.Connector, chat.ThreadRef) {
	t.Helper()
	app := fmt.Sprintf("cli_long_%d", appSeq.Add(1))
	fake := feishutest.New(app, appSecret, opts...)
	t.Cleanup(fake.Close)
	conn, err := feishu.New(feishu.Options{Mode: feishu.ModeCallback, AppID: app, AppSecret: appSecret,
		VerificationToken: vtoken, BaseURL: fake.URL(), Log: newTestLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	th, _, err := conn.StartThread(context.Background(), "oc_1", chat.Message{Request: "R1", Kind: "parent",
		Card: &chat.Card{Title: "R1"}, IdempotencyKey: "R1/parent"})
	if err != nil {
		t.Fatal(err)
	}
	return fake, conn, th
}

// topicReplies is the replies in the topic of th: their types and contents.
func topicReplies(fake *feishutest.Server, th chat.ThreadRef) (types []string, contents []map[string]string) {
	for _, m := range fake.Messages() {
		if m.RootID == th.ID {
			var c map[string]string
			_ = json.Unmarshal(m.Content, &c)
			types, contents = append(types, m.MsgType), append(contents, c)
		}
	}
	return types, contents
}

func longText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%d 答案 😀 & <ok> \"q\" %s\n", i, strings.Repeat("x", i%40))
	}
	return b.String()[:n]
}

// An answer too long for one text message (150 KB) goes in parts, each with a uuid of its own; a part
// refused for the rate limit is sent again, with the parts before it, which Feishu drops by their
// uuids: each part is in the topic once, and together they are the answer.
func TestLongAnswerInParts(t *testing.T) {
	clk := &stopClock{now: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	fake, conn, th := longSetup(t, feishutest.WithClock(clk), feishutest.WithRateLimits(feishutest.RateLimits{PerChat: 3}))
	ctx := context.Background()
	text := longText(300_000)
	m := chat.Message{Request: "R1", Kind: "final", Text: text, IdempotencyKey: "R1/final"}
	if _, err := conn.Reply(ctx, th, m); err == nil {
		t.Fatal("the chat's limit: no error")
	}
	clk.add(time.Minute)
	if _, err := conn.Reply(ctx, th, m); err != nil {
		t.Fatal(err)
	}
	types, contents := topicReplies(fake, th)
	if len(types) != 3 {
		t.Fatalf("%d replies (%q), want 3 parts", len(types), types)
	}
	var whole strings.Builder
	for i, c := range contents {
		body, ok := strings.CutSuffix(c["text"], fmt.Sprintf("\n\n(part %d/3)", i+1))
		if !ok || types[i] != "text" {
			t.Errorf("part %d: a %s ending %q", i+1, types[i], c["text"][max(0, len(c["text"])-20):])
		}
		whole.WriteString(body)
	}
	if strings.Join(strings.Fields(whole.String()), "") != strings.Join(strings.Fields(text), "") {
		t.Errorf("the parts are not the answer")
	}
}

// An answer too long for three messages is uploaded (im/v1/files) and sent as a file message in the
// topic, then a text that says so; a retry sends neither again.
func TestLongAnswerAsFile(t *testing.T) {
	fake, conn, th := longSetup(t)
	ctx := context.Background()
	text := longText(600_000)
	m := chat.Message{Request: "R1", Kind: "final", Text: text, IdempotencyKey: "R1/final"}
	for range 2 {
		if _, err := conn.Reply(ctx, th, m); err != nil {
			t.Fatal(err)
		}
	}
	files := fake.Files()
	if len(files) == 0 || string(files[0].Content) != text || !strings.HasPrefix(files[0].Name, "R1-") {
		t.Fatalf("%d files; want the answer's, named R1-….md", len(files))
	}
	types, contents := topicReplies(fake, th)
	if len(types) != 2 || types[0] != "file" || types[1] != "text" ||
		contents[0]["file_key"] != files[0].Key || !strings.Contains(contents[1]["text"], "attached as "+files[0].Name) {
		t.Errorf("topic: %q %q; want the file %s, then a text that names it", types, contents, files[0].Key)
	}
}
