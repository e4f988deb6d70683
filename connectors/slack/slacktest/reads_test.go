package slacktest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

// Metadata sent with chat.postMessage is stored and comes back from
// conversations.history and conversations.replies only with
// include_all_metadata; both read methods page by cursor (history newest
// first, replies oldest first), honour oldest/latest, and answer 429 over
// their Tier 3 budget.
func TestReadsAndMetadata(t *testing.T) {
	srv, api, clk := newServer(t, slacktest.PostMessageLimit(0, 0), slacktest.ReadLimit(time.Minute/50, 4))
	ctx := ctxT(t)
	md := func(k string) slack.MsgOption {
		return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "roombridge_effect", EventPayload: map[string]any{"key": k}})
	}
	_, p1, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("parent 1", false), md("k1"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	var rs []string
	for i := range 3 {
		_, ts, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText(fmt.Sprintf("reply %d", i), false),
			slack.MsgOptionTS(p1), md(fmt.Sprintf("r%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, ts)
	}
	user, err := srv.AddUserMessage("C1", "U1", "hello", "")
	if err != nil {
		t.Fatal(err)
	}
	_, p2, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("parent 2", false), md("k2"))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := srv.Message("C1", p2); m.Metadata == nil || m.Metadata.EventPayload["key"] != "k2" {
		t.Fatalf("stored metadata %+v", m.Metadata)
	}

	// History: top-level only, newest first, two to a page.
	h, err := api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C1", Limit: 2,
		IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 2 || h.Messages[0].Timestamp != p2 || h.Messages[1].Timestamp != user || !h.HasMore ||
		h.Messages[0].Metadata.EventPayload["key"] != "k2" || h.Messages[0].BotID != slacktest.BotID || h.Messages[1].BotID != "" {
		t.Fatalf("history page 1: %+v", h)
	}
	h, err = api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C1", Limit: 2,
		IncludeAllMetadata: true, Cursor: h.ResponseMetaData.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 1 || h.Messages[0].Timestamp != p1 || h.HasMore || h.Messages[0].Metadata.EventType != "roombridge_effect" {
		t.Fatalf("history page 2: %+v", h)
	}
	// Without include_all_metadata, no metadata; oldest bounds the range (exclusive).
	h, err = api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C1", Oldest: p1})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 2 || h.Messages[0].Metadata.EventType != "" {
		t.Fatalf("history since %s without metadata: %+v", p1, h.Messages)
	}

	// Replies: the parent then its replies, oldest first, paged.
	msgs, more, cursor, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: "C1", Timestamp: p1, Limit: 3, IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || msgs[0].Timestamp != p1 || msgs[2].Timestamp != rs[1] || !more ||
		msgs[2].Metadata.EventPayload["key"] != "r1" {
		t.Fatalf("replies page 1: %+v more=%v", msgs, more)
	}
	msgs, more, _, err = api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: "C1", Timestamp: p1, Limit: 3, IncludeAllMetadata: true, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Timestamp != rs[2] || more {
		t.Fatalf("replies page 2: %+v more=%v", msgs, more)
	}
	// Budget: burst 4, one per 1.2 s, per method.
	clk.Advance(2 * time.Minute)
	msgs, _, _, err = api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: "C1", Timestamp: rs[0], Oldest: rs[0], IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Timestamp != rs[1] {
		t.Fatalf("replies after %s (named by a reply's ts): %+v", rs[0], msgs)
	}
	for range 3 {
		if _, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: p1}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, _, err = api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: p1})
	wantRateLimited(t, err, 2*time.Second) // the next slot is 1.2 s away: Retry-After says 2
	if _, err := api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C1"}); err != nil {
		t.Fatalf("history has a budget of its own: %v", err)
	}

	// Errors.
	clk.Advance(time.Minute)
	_, _, _, err = api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: "1.000001"})
	slackErr(t, err, "thread_not_found")
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false), slack.MsgOptionMetadata(slack.SlackMetadata{}))
	slackErr(t, err, "invalid_metadata_format")
}
