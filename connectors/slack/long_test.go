package slack_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// longText is n characters of numbered lines (CJK and emoji among them), so that a lost or repeated
// piece shows.
func longText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(strings.Repeat("答案 😀 & <ok> ", 3))
		b.WriteString(strings.Repeat("x", i%40))
		b.WriteString("\n")
	}
	return b.String()[:n]
}

// thread starts a thread on fake through a connector of its own.
func longSetup(t *testing.T, opts ...slacktest.Option) (*slacktest.Server, *slack.Connector, chat.ThreadRef) {
	t.Helper()
	fake := slacktest.NewServer(opts...)
	t.Cleanup(fake.Close)
	conn, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken,
		SigningSecret: secret, APIURL: fake.APIURL(), PostSpacing: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	th, _, err := conn.StartThread(context.Background(), "C1", chat.Message{Request: "R1", Kind: "parent", Text: "R1"})
	if err != nil {
		t.Fatal(err)
	}
	return fake, conn, th
}

// replyTexts is the text of the replies of thread th.
func replyTexts(fake *slacktest.Server, th chat.ThreadRef) []string {
	var out []string
	for _, m := range fake.Thread(th.Channel, th.ID)[1:] {
		out = append(out, m.Text)
	}
	return out
}

// An answer too long for one message goes in parts, each within Slack's 40,000 characters and marked
// with its place, that together are the whole answer; the outbox's lookup finds the answer only by
// its last part. A post whose answer was lost is found by the lookup and not posted again.
func TestLongAnswerInParts(t *testing.T) {
	fake, conn, th := longSetup(t, slacktest.PostMessageLimit(0, 1))
	ctx := context.Background()
	text := longText(100_000)
	m := chat.Message{Request: "R1", Kind: "final", Text: text, IdempotencyKey: "R1/final"}
	fake.LoseNextAnswer("chat.postMessage") // part 1 goes out, its answer does not come back
	if _, err := conn.Reply(ctx, th, m); err == nil {
		t.Fatal("a lost answer: no error")
	}
	l := chat.Lookup{Key: m.IdempotencyKey, Thread: &th}
	if _, found, err := conn.FindPosted(ctx, l); err != nil || found {
		t.Fatalf("lookup with one part of three posted: found %v, %v", found, err)
	}
	ref, err := conn.Reply(ctx, th, m)
	if err != nil {
		t.Fatal(err)
	}
	parts := replyTexts(fake, th)
	if len(parts) != 3 {
		t.Fatalf("%d replies, want 3 parts", len(parts))
	}
	var whole strings.Builder
	for i, p := range parts {
		if n := len([]rune(p)); n > 40_000 {
			t.Errorf("part %d: %d characters", i+1, n)
		}
		body, ok := strings.CutSuffix(p, "\n\n(part "+string(rune('1'+i))+"/3)")
		if !ok {
			t.Errorf("part %d ends %q", i+1, p[max(0, len(p)-20):])
		}
		whole.WriteString(body)
	}
	unescape := strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">")
	if got := strings.Join(strings.Fields(unescape.Replace(whole.String())), ""); got != strings.Join(strings.Fields(text), "") {
		t.Errorf("the parts are not the answer (%d bytes, want %d)", len(got), len(text))
	}
	found, ok, err := conn.FindPosted(ctx, l)
	if err != nil || !ok || found.ID != ref.ID {
		t.Errorf("lookup after the post: %+v %v %v, want the last part %s", found, ok, err, ref.ID)
	}
}

// A part refused for the rate limit is posted again without the parts before it.
func TestLongAnswerRetriedAfterALimit(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	fake, conn, th := longSetup(t, slacktest.Clock(func() time.Time { return now }))
	ctx := context.Background()
	m := chat.Message{Request: "R1", Kind: "final", Text: longText(100_000), IdempotencyKey: "R1/final"}
	_, err := conn.Reply(ctx, th, m) // the parent and part 1 take the fake's burst: part 2 is refused
	var ra *chat.RetryAfterError
	if !errors.As(err, &ra) {
		t.Fatalf("third post: %v, want a rate limit", err)
	}
	now = now.Add(10 * time.Second)
	if _, err := conn.Reply(ctx, th, m); err != nil {
		t.Fatal(err)
	}
	if got := replyTexts(fake, th); len(got) != 3 {
		t.Errorf("%d replies, want the 3 parts once each", len(got))
	}
}

// An answer too long for three messages is uploaded as a Markdown file (files.getUploadURLExternal,
// the upload, files.completeUploadExternal) shared in the thread with a comment that says so; a
// retry after the completion's answer was lost finds it and uploads nothing more.
func TestLongAnswerAsFile(t *testing.T) {
	fake, conn, th := longSetup(t)
	ctx := context.Background()
	text := longText(150_000)
	m := chat.Message{Request: "R1", Kind: "final", Text: text, IdempotencyKey: "R1/final"}
	fake.LoseNextAnswer("files.completeUploadExternal")
	if _, err := conn.Reply(ctx, th, m); err == nil {
		t.Fatal("a lost answer: no error")
	}
	ref, found, err := conn.FindPosted(ctx, chat.Lookup{Key: m.IdempotencyKey, Thread: &th})
	if err != nil || !found {
		t.Fatalf("lookup of the shared file: %v %v", found, err)
	}
	files := fake.Files()
	if len(files) != 1 || string(files[0].Content) != text || !files[0].Shared || files[0].TS != ref.ID {
		t.Fatalf("files: %d; want one, shared as %s, holding the whole answer", len(files), ref.ID)
	}
	replies := fake.Thread(th.Channel, th.ID)[1:]
	if len(replies) != 1 || !strings.Contains(replies[0].Text, "attached as "+files[0].Name) ||
		!strings.HasSuffix(files[0].Name, ".md") || !strings.HasPrefix(files[0].Name, "R1-") {
		t.Errorf("thread: %d replies (%q), file %q", len(replies), replyTexts(fake, th), files[0].Name)
	}
}
