package slack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
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
// exactly once, in order in its thread, without a single lookup.
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
	if hist, rep := h.lookups(); hist+rep != 0 {
		t.Errorf("%d conversations.history and %d conversations.replies calls: normal posts make no lookup", hist, rep)
	}
	t.Logf("%d posts, %d updates", h.fake.Calls("chat.postMessage"), h.fake.Calls("chat.update"))
}

// tripwire is a transport that "crashes" the bridge once, at the first Web
// API call it matches: right after Slack answered it, before the outbox
// can record it (or, before set, before Slack sees it), it closes the store.
type tripwire struct {
	next   http.RoundTripper
	match  func(method string, form url.Values) bool
	before bool
	fired  atomic.Bool
	crash  func()
	done   chan struct{} // closed after the crash
}

func (w *tripwire) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	if !w.match(path.Base(req.URL.Path), form) || !w.fired.CompareAndSwap(false, true) {
		return w.next.RoundTrip(req)
	}
	if w.before {
		w.crash()
		close(w.done)
		return nil, errors.New("tripwire: the bridge stopped before the request went out")
	}
	resp, err := w.next.RoundTrip(req)
	w.crash()
	close(w.done)
	return resp, err
}

// posting matches the post of text.
func posting(text string) func(string, url.Values) bool {
	return func(method string, f url.Values) bool { return method == "chat.postMessage" && f.Get("text") == text }
}

// crashHarness is a harness whose bridge crashes once, at the call match
// matches (see tripwire); s adds to fast(events mode).
func crashHarness(t *testing.T, match func(string, url.Values) bool, before bool, s setup) (*harness, *tripwire) {
	var h *harness
	wire := &tripwire{match: match, before: before, crash: func() { _ = h.db.Close() }, done: make(chan struct{})}
	s.mode = slack.ModeEvents
	s.wrapHTTP = func(rt http.RoundTripper) http.RoundTripper {
		wire.next = rt
		return wire
	}
	h = newHarness(t, fast(s))
	return h, wire
}

// waitCrash waits for the tripwire, then starts the bridge again.
func (h *harness) waitCrash(wire *tripwire) {
	h.t.Helper()
	select {
	case <-wire.done:
	case <-h.ctx().Done():
		h.t.Fatal("the tripwire never fired")
	}
	h.restart()
}

// lookups is how many conversations.history and conversations.replies calls
// the fake got.
func (h *harness) lookups() (history, replies int) {
	return h.fake.Calls("conversations.history"), h.fake.Calls("conversations.replies")
}

// The bridge stops after Slack took a post and before the outbox recorded
// it. After the restart the post in flight at the crash, first of its thread
// in the outbox, is in doubt: the outbox looks for it in the thread
// (conversations.replies, by the key in its metadata), finds it and records
// it: the final answer shows once. The parent is never posted twice either:
// its ts was recorded when it was posted, and a parent effect delivered
// again (here one queued anew) sees that and posts nothing.
func TestRestartBetweenPostingAndRecording(t *testing.T) {
	h, wire := crashHarness(t, posting("finale"), false, setup{})
	h.mention(owner, "coder echo finale")
	h.waitCrash(wire)

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
	if got, want := h.replies(ps[0].TS), []string{"finale"}; !slices.Equal(got, want) {
		t.Errorf("replies %q, want %q (the post in flight at the crash, once)", got, want)
	}
	if !strings.HasSuffix(ps[0].Text, "— done") {
		t.Errorf("parent shows %q", ps[0].Text)
	}
	if hist, rep := h.lookups(); hist != 0 || rep != 1 {
		t.Errorf("%d conversations.history and %d conversations.replies calls, want 0 and 1", hist, rep)
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
		if err == nil || errors.As(err, &ra) || errors.Is(err, chat.ErrPermanent) != tc.permanent {
			t.Errorf("%v: permanent=%v, want %v", err, errors.Is(err, chat.ErrPermanent), tc.permanent)
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
