package slack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// A burst of 100 requests into one channel: the fake enforces its limits
// (one post per channel per fakePost, chat.update budget, one edit per
// message per second) and answers no 429, and every parent and reply arrives
// exactly once, in order in its thread.
func TestBurstIntoOneChannel(t *testing.T) {
	const n = 100
	ags := []string{"a1", "a2", "a3", "a4"}
	h := newHarness(t, fast(setup{mode: slack.ModeEvents, agents: ags}))
	for i := range n {
		h.mention(owner, fmt.Sprintf("%s say said %d; echo final %d", ags[i%len(ags)], i, i))
	}
	h.waitStore("every request done and delivered", func() bool {
		rs, _ := h.svc.List(h.ctx(), requests.Filter{State: requests.Done})
		return len(rs) == n && h.outboxEmpty()
	})
	for _, r := range h.requests() {
		var i int
		if _, err := fmt.Sscanf(r.Ask, "say said %d;", &i); err != nil {
			t.Fatalf("ask %q: %v", r.Ask, err)
		}
		ps := h.parents(r.ID.String())
		if len(ps) != 1 {
			t.Errorf("%s: %d parents", r.ID, len(ps))
			continue
		}
		if got, want := h.replies(ps[0].TS), []string{fmt.Sprintf("said %d", i), fmt.Sprintf("final %d", i)}; !slices.Equal(got, want) {
			t.Errorf("%s: replies %q, want %q", r.ID, got, want)
		}
		if !strings.HasSuffix(ps[0].Text, "— done") {
			t.Errorf("%s: parent shows %q", r.ID, ps[0].Text)
		}
	}
	if got := len(h.fake.Messages()); got != 4*n { // the mentions, parents and two replies each
		t.Errorf("%d messages in the channel, want %d", got, 4*n)
	}
	for _, m := range []string{"chat.postMessage", "chat.update"} {
		if k := h.fake.RateLimited(m); k != 0 {
			t.Errorf("%s: %d answers 429", m, k)
		}
	}
	t.Logf("%d posts, %d updates", h.fake.Calls("chat.postMessage"), h.fake.Calls("chat.update"))
}

// tripwire is a transport that "crashes" the bridge once: right after Slack
// answered the post it matches, before the outbox can record it, it closes
// the store.
type tripwire struct {
	next  http.RoundTripper
	match string
	fired atomic.Bool
	crash func()
	done  chan struct{} // closed after the crash
}

func (w *tripwire) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := w.next.RoundTrip(req)
	if err == nil && strings.HasSuffix(req.URL.Path, "/chat.postMessage") && bytes.Contains(body, []byte(w.match)) &&
		w.fired.CompareAndSwap(false, true) {
		w.crash()
		close(w.done)
	}
	return resp, err
}

// The bridge stops after Slack took a post and before the outbox recorded it.
// After the restart the outbox never posts a second parent: its ts was
// recorded when it was posted, and a parent effect delivered again (here one
// queued anew) sees that and posts nothing. The remaining window: the post
// that was in flight at the crash was not recorded, so it is posted again
// (Slack has no idempotency key): the final answer shows twice.
func TestRestartBetweenPostingAndRecording(t *testing.T) {
	var h *harness
	wire := &tripwire{match: "text=finale", crash: func() { _ = h.db.Close() }, done: make(chan struct{})}
	h = newHarness(t, fast(setup{mode: slack.ModeEvents, wrapHTTP: func(rt http.RoundTripper) http.RoundTripper {
		wire.next = rt
		return wire
	}}))
	h.mention(owner, "coder echo finale")
	select {
	case <-wire.done:
	case <-h.ctx().Done():
		t.Fatal("the final answer was never posted")
	}
	h.restart()

	r := h.requests()[0]
	id := r.ID.String()
	if r.State != requests.Done {
		t.Fatalf("%s is %s after the restart", id, r.State)
	}
	// The parent's effect, delivered again.
	if err := h.db.Update(h.ctx(), func(tx store.Tx) error {
		return threads.Enqueue(tx, threads.Effect{Op: threads.OpThread, Request: id, Surface: chat.Slack,
			Channel: channel, Save: threads.ParentRef(id), Message: threads.Parent(r)})
	}); err != nil {
		t.Fatal(err)
	}
	h.waitStore("the outbox to drain", h.outboxEmpty)
	ps := h.parents(id)
	if len(ps) != 1 {
		t.Fatalf("%d parents after the restart, want 1", len(ps))
	}
	if got, want := h.replies(ps[0].TS), []string{"finale", "finale"}; !slices.Equal(got, want) {
		t.Errorf("replies %q, want %q (the post in flight at the crash is posted again)", got, want)
	}
	if !strings.HasSuffix(ps[0].Text, "— done") {
		t.Errorf("parent shows %q", ps[0].Text)
	}
}

// Web API failures reach the outbox as what they mean: 429 as the wait
// Slack asked for, requests Slack will never accept as permanent, outages
// and auth trouble as plain errors (retried with back-off).
func TestErrorsForTheOutbox(t *testing.T) {
	fake := slacktest.NewServer(slacktest.PostMessageLimit(0, 1))
	defer fake.Close()
	c, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken,
		SigningSecret: secret, APIURL: fake.APIURL(), PostSpacing: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg := chat.Message{Request: "R1", Kind: "parent", Card: &chat.Card{Title: "R1 · coder · asked by slack:U1", Status: "pending"}}

	fake.FailNext("chat.postMessage", http.StatusTooManyRequests, 3*time.Second)
	_, _, err = c.StartThread(ctx, channel, msg)
	var ra *chat.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 3*time.Second {
		t.Errorf("429: %v, want a RetryAfterError of 3s", err)
	}

	for _, tc := range []struct {
		fail      func()
		permanent bool
	}{
		{func() { fake.FailNext("chat.postMessage", http.StatusServiceUnavailable, 0) }, false},
		{func() { fake.FailNextError("chat.postMessage", "internal_error") }, false},
		{func() { fake.FailNextError("chat.postMessage", "invalid_auth") }, false},
		{func() { fake.FailNextError("chat.postMessage", "channel_not_found") }, true},
		{func() { fake.FailNextError("chat.postMessage", "is_archived") }, true},
	} {
		tc.fail()
		_, _, err := c.StartThread(ctx, channel, msg)
		if err == nil || errors.As(err, &ra) || errors.Is(err, threads.ErrPermanent) != tc.permanent {
			t.Errorf("%v: permanent=%v, want %v", err, errors.Is(err, threads.ErrPermanent), tc.permanent)
		}
	}

	// A card updated without buttons loses them; Direct reaches the user's DM.
	tref, mref, err := c.StartThread(ctx, channel, chat.Message{Kind: "approval", Card: &chat.Card{Title: "Approval needed",
		BlockID: "approval:R1:1", Buttons: []chat.Button{{ActionID: "approve", Label: "Approve", Value: "R1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, mref, chat.Message{Kind: "approval", Card: &chat.Card{Title: "Approval needed", Status: "approved"}}); err != nil {
		t.Fatal(err)
	}
	if m, _ := fake.Message(channel, tref.ID); bytes.Contains(m.BlocksJSON, []byte(`"actions"`)) || len(m.Updates) != 1 {
		t.Errorf("updated card %s (%d updates)", m.BlocksJSON, len(m.Updates))
	}
	dm, err := c.Direct(ctx, owner, chat.Message{Kind: "approval", Text: "approve?"})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := fake.Message(dm.Channel, dm.ID); !ok || !strings.HasPrefix(dm.Channel, "D") || m.Text != "approve?" {
		t.Errorf("direct message %+v: %+v", dm, m)
	}
}
