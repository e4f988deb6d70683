package slack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// streamAsk streams an answer over a second, then runs a tool.
const streamAsk = "coder stream 1s alpha beta gamma delta epsilon; tool build 50ms"

// answerOf waits for the one request to be done and returns its answer.
func (h *harness) answerOf() (string, string) {
	h.t.Helper()
	var r *requests.Request
	h.waitStore("the request done and delivered", func() bool {
		rs := h.requests()
		if len(rs) == 1 && rs[0].State == requests.Done && h.outboxEmpty() {
			r = rs[0]
		}
		return r != nil
	})
	return r.ID.String(), r.Result
}

// botReplies are the bot's replies in the channel's threads.
func botReplies(s *slacktest.Server) []slacktest.Message {
	var out []slacktest.Message
	for _, m := range s.Messages() {
		if m.User == slacktest.BotUserID && m.Channel == channel && m.ThreadTS != "" {
			out = append(out, m)
		}
	}
	return out
}

// TestStreamNative: the answer is streamed into the request's thread with
// chat.startStream (to the asker) and chat.appendStream, the tool is a task
// card, and the final answer stops the stream: the streamed message's text
// is exactly the stored answer, and it is not posted a second time.
func TestStreamNative(t *testing.T) {
	h := newHarness(t, fast(setup{mode: "events"}))
	h.mention(owner, streamAsk)
	_, answer := h.answerOf()
	if answer != "alpha beta gamma delta epsilon" {
		t.Fatalf("answer %q", answer)
	}
	var live []slacktest.Message
	for _, m := range botReplies(h.fake) {
		if strings.Contains(m.Text, "alpha") {
			live = append(live, m)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d replies with the answer, want the one live message: %+v", len(live), live)
	}
	m := live[0]
	if m.Streaming || m.Text != answer || m.Recipient != owner || m.Appends < 2 {
		t.Errorf("live message: streaming %v, text %q, recipient %q, %d appends; want stopped, the answer, %s, appends",
			m.Streaming, m.Text, m.Recipient, m.Appends, owner)
	}
	if len(m.Tasks) != 1 || m.Tasks[0].Title != "build" || m.Tasks[0].Status != "complete" {
		t.Errorf("tasks %+v, want build complete", m.Tasks)
	}
	if n := h.fake.RateLimited("chat.appendStream") + h.fake.RateLimited("chat.startStream"); n != 0 {
		t.Errorf("%d streaming calls rate limited", n)
	}
}

// TestStreamRefusedFallsBackToEdits: where Slack refuses to stream, the
// live message is one reply edited with chat.update (at most once a second,
// which the fake enforces), ending with exactly the stored answer, posted
// once.
func TestStreamRefusedFallsBackToEdits(t *testing.T) {
	s := fast(setup{mode: "events"})
	s.fake = append(s.fake, slacktest.RefuseStreaming("missing_scope"))
	h := newHarness(t, s)
	h.mention(owner, streamAsk)
	_, answer := h.answerOf()
	var live []slacktest.Message
	for _, m := range botReplies(h.fake) {
		if strings.Contains(m.Text, "alpha") {
			live = append(live, m)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d replies with the answer, want one: %+v", len(live), live)
	}
	m := live[0]
	if m.Streaming || m.Text != answer || len(m.Updates) < 2 {
		t.Errorf("live reply: text %q, %d updates; want the answer %q after edits", m.Text, len(m.Updates), answer)
	}
	for i := 1; i < len(m.Updates); i++ {
		if gap := m.Updates[i].At.Sub(m.Updates[i-1].At); gap < time.Second {
			t.Errorf("edits %d and %d %s apart, want at least 1s", i-1, i, gap)
		}
	}
	if n := h.fake.RateLimited("chat.update"); n != 0 {
		t.Errorf("%d chat.update calls rate limited", n)
	}
}

// TestStreamStartInDoubtPostsNoFallback: Slack starts the stream but
// chat.startStream's answer is lost on the way back (a transport error).
// The connector cannot tell that no stream was started, so it posts no
// fallback reply beside the one Slack may have started: the live message
// does not open, and the answer is in the thread once, posted by the outbox
// as a plain reply (never edited).
func TestStreamStartInDoubtPostsNoFallback(t *testing.T) {
	h := newHarness(t, fast(setup{mode: "events"}))
	h.fake.LoseNextAnswer("chat.startStream")
	h.mention(owner, streamAsk)
	_, answer := h.answerOf()
	var withAnswer []slacktest.Message
	for _, m := range botReplies(h.fake) {
		switch {
		case m.Streaming && m.Text == "": // the stream Slack started: nobody knows its ts
		case strings.Contains(m.Text, "alpha"):
			withAnswer = append(withAnswer, m)
		default:
			t.Errorf("reply %q (streaming %v): want none but the answer", m.Text, m.Streaming)
		}
	}
	if len(withAnswer) != 1 || withAnswer[0].Text != answer || withAnswer[0].Streaming || len(withAnswer[0].Updates) != 0 {
		t.Fatalf("replies with the answer %+v, want one, posted once with the answer %q and not edited", withAnswer, answer)
	}
	if n := h.fake.Calls("chat.startStream"); n != 1 {
		t.Errorf("%d chat.startStream calls, want 1", n)
	}
}

// TestStreamCloseFailedForGoodIsForgotten: the answer's chat.stopStream
// fails for good (message_not_found: the live message was deleted), so the
// outbox drops the close; the connector keeps nothing of the live message
// in memory afterwards.
func TestStreamCloseFailedForGoodIsForgotten(t *testing.T) {
	h := newHarness(t, fast(setup{mode: "events"}))
	h.fake.FailNextError("chat.stopStream", "message_not_found")
	h.mention(owner, streamAsk)
	h.answerOf() // the request done, the outbox empty: the close dropped
	if n := h.fake.Calls("chat.stopStream"); n != 1 {
		t.Fatalf("%d chat.stopStream calls, want the one that failed", n)
	}
	if !strings.Contains(h.logs.String(), "dropping undeliverable effect") {
		t.Errorf("the failed close was not dropped")
	}
	appended := false
	for _, m := range botReplies(h.fake) {
		appended = appended || m.Streaming && m.Appends > 0
	}
	if !appended {
		t.Errorf("no live message was streamed into: %+v", botReplies(h.fake))
	}
	if n := slack.LiveMessages(h.conn); n != 0 {
		t.Errorf("%d live messages still in memory after their close failed for good, want 0", n)
	}
}

// TestStreamRestartClosesInterrupted: the bridge stops while an answer
// streams; the next start closes that live message as interrupted, the
// resumed turn streams anew, and the answer is shown exactly once (in the
// new live message, which ends as the stored answer).
func TestStreamRestartClosesInterrupted(t *testing.T) {
	h := newHarness(t, fast(setup{mode: "events"}))
	h.mention(owner, "coder stream 4s one two three four five six seven eight")
	h.waitFake("the answer streaming", func(s *slacktest.Server) bool {
		for _, m := range botReplies(s) {
			if m.Streaming && strings.HasPrefix(m.Text, "one two") {
				return true
			}
		}
		return false
	})
	h.restart()
	_, answer := h.answerOf()
	var interrupted, shown int
	for _, m := range botReplies(h.fake) {
		switch {
		case m.Streaming:
			t.Errorf("live message %s never closed: %q", m.TS, m.Text)
		case m.Text == answer:
			shown++
		case strings.HasPrefix(m.Text, "(interrupted"):
			interrupted++
		}
	}
	if interrupted != 1 || shown != 1 {
		t.Errorf("%d live messages closed as interrupted, the answer shown %d times; want 1 and 1: %+v",
			interrupted, shown, botReplies(h.fake))
	}
}

// BenchmarkSlack50Streams: 50 requests (50 agents) stream their answers at
// once into one channel through the fake Slack, with Slack's limits on the
// streaming methods (appendStream Tier 4 per app, stopStream Tier 2) and
// posts paced fast (the fake's per-channel post limit at 10 ms): no call is
// answered 429, and every answer lands in its live message. It reports the
// 429s, the appends per stream and how long until all 50 answers landed.
func BenchmarkSlack50Streams(b *testing.B) {
	for b.Loop() {
		var names []string
		for i := range 50 {
			names = append(names, fmt.Sprintf("a%d", i))
		}
		h := newHarness(b, fast(setup{mode: "events", agents: names}))
		began := time.Now()
		for _, a := range names {
			h.mention(owner, a+" stream 10s "+strings.Repeat(a+" writes a word ", 20))
		}
		// chat.stopStream's Tier 2 (about 20 a minute) paces the answers:
		// longer than the harness's usual wait.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err := h.fake.WaitFor(ctx, func(s *slacktest.Server) bool {
			closed := 0
			for _, m := range botReplies(s) {
				if m.Recipient == owner && !m.Streaming && strings.HasSuffix(m.Text, "writes a word") {
					closed++
				}
			}
			return closed == 50
		})
		cancel()
		if err != nil {
			b.Fatalf("waiting for the 50 answers: %v", err)
		}
		h.waitStore("the outbox empty", h.outboxEmpty)
		took := time.Since(began)
		appends, shown := 0, 0
		for _, m := range botReplies(h.fake) {
			appends += m.Appends
			if m.Recipient == owner && !m.Streaming && strings.HasSuffix(m.Text, "writes a word") {
				shown++
			}
		}
		limited := 0
		for _, m := range []string{"chat.postMessage", "chat.startStream", "chat.appendStream", "chat.stopStream", "chat.update"} {
			limited += h.fake.RateLimited(m)
		}
		if limited != 0 || shown != 50 {
			b.Errorf("%d calls answered 429, %d of 50 answers in their live messages", limited, shown)
		}
		b.ReportMetric(float64(limited), "429s")
		b.ReportMetric(float64(appends)/50, "appends/stream")
		b.ReportMetric(took.Seconds(), "s-to-all-answers")
	}
}

// TestRefusedStreamOnlyWhenSure: chat.startStream answered ok:false with an
// error of Slack's side or a limit (internal_error, fatal_error,
// request_timeout, service_unavailable, ratelimited) is in doubt, as a lost
// answer is (TestStreamStartInDoubtPostsNoFallback): Slack may have
// started the stream, so no fallback reply is posted beside it, and the
// answer is in the thread once, a plain reply. A refusal (not_allowed) is
// sure: the live message is a fallback reply, edited.
func TestRefusedStreamOnlyWhenSure(t *testing.T) {
	for _, code := range []string{"internal_error", "fatal_error", "request_timeout", "service_unavailable", "ratelimited", "not_allowed"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fast(setup{mode: "events"}))
			h.fake.FailNextError("chat.startStream", code)
			h.mention(owner, streamAsk)
			_, answer := h.answerOf()
			replies := botReplies(h.fake)
			if len(replies) != 1 || replies[0].Text != answer || replies[0].Streaming {
				t.Fatalf("replies %+v, want one, the answer %q", replies, answer)
			}
			edited := len(replies[0].Updates) > 0
			if refused := code == "not_allowed"; edited != refused {
				t.Errorf("the answer's reply was edited: %v, want %v (a fallback reply only when Slack refused for sure)", edited, refused)
			}
			if n := h.fake.Calls("chat.startStream"); n != 1 {
				t.Errorf("%d chat.startStream calls, want 1", n)
			}
		})
	}
}
