package slack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// The bridge stops right after Slack took the parent of a new thread. After
// the restart the parent's effect is in doubt: the outbox finds the parent in
// the channel (conversations.history, by its key), records its ts, and the
// status edits and the answer that follow go to that one parent.
func TestRestartWhileParentInFlight(t *testing.T) {
	h, wire := crashHarness(t, func(method string, f url.Values) bool {
		return method == "chat.postMessage" && f.Get("thread_ts") == ""
	}, false, setup{})
	h.mention(owner, "coder echo finale")
	h.waitCrash(wire)
	h.waitStore("the request done and delivered", func() bool {
		rs := h.requests()
		return len(rs) == 1 && rs[0].State == requests.Done && h.outboxEmpty()
	})
	id := h.requests()[0].ID.String()
	ps := h.parents(id)
	if len(ps) != 1 {
		t.Fatalf("%d parents, want 1", len(ps))
	}
	if !strings.HasSuffix(ps[0].Text, "— done") || len(ps[0].Updates) == 0 {
		t.Errorf("parent shows %q after %d updates: want the status edits on it", ps[0].Text, len(ps[0].Updates))
	}
	// The turn the stop cut is resumed, and says so (agents.ResumedNote).
	if got, want := h.replies(ps[0].TS), []string{agents.ResumedNote, "finale"}; !slices.Equal(got, want) {
		t.Errorf("replies %q, want %q", got, want)
	}
	if hist, rep := h.lookups(); hist != 1 || rep != 0 {
		t.Errorf("%d conversations.history and %d conversations.replies calls, want 1 and 0", hist, rep)
	}
}

// A lookup that fails does not hold the answer back: the bridge stopped
// before the answer reached Slack, the lookup after the restart fails, and
// the answer is posted, once (at least once: had the first post gone out,
// it would show twice, as before lookups). A lookup refused with a rate
// limit is made again after Slack's wait, and finds the answer posted before
// the crash: once.
func TestLookupFailure(t *testing.T) {
	t.Run("error", func(t *testing.T) {
		h, wire := crashHarness(t, posting("finale"), true, setup{})
		h.mention(owner, "coder echo finale")
		h.fake.FailNextError("conversations.replies", "internal_error")
		h.waitCrash(wire)
		h.waitStore("the outbox to drain", h.outboxEmpty)
		id := h.requests()[0].ID.String()
		ps := h.parents(id)
		if len(ps) != 1 {
			t.Fatalf("%d parents, want 1", len(ps))
		}
		if got, want := h.replies(ps[0].TS), []string{"finale"}; !slices.Equal(got, want) {
			t.Errorf("replies %q, want %q", got, want)
		}
		if !strings.Contains(h.logs.String(), "looking for a post in doubt failed; posting it") {
			t.Error("the failed lookup is not in the log")
		}
	})
	t.Run("rate limited", func(t *testing.T) {
		h, wire := crashHarness(t, posting("finale"), false, setup{})
		h.mention(owner, "coder echo finale")
		h.fake.FailNext("conversations.replies", http.StatusTooManyRequests, time.Second)
		h.waitCrash(wire)
		h.waitStore("the outbox to drain", h.outboxEmpty)
		id := h.requests()[0].ID.String()
		ps := h.parents(id)
		if got, want := h.replies(ps[0].TS), []string{"finale"}; len(ps) != 1 || !slices.Equal(got, want) {
			t.Errorf("%d parents, replies %q: want 1 and %q", len(ps), got, want)
		}
		if _, rep := h.lookups(); rep != 2 || h.fake.RateLimited("conversations.replies") != 1 {
			t.Errorf("%d conversations.replies calls (%d answered 429), want 2 (1)", rep, h.fake.RateLimited("conversations.replies"))
		}
	})
}

// recovery is the Slack connector and a Deliverer on a bolt store, without
// agents: effects are queued by hand, and posts "before a crash" are made
// with the connector directly.
type recovery struct {
	t    *testing.T
	fake *slacktest.Server
	conn *slack.Connector
	db   *bolt.DB
	log  *slog.Logger
}

func newRecovery(t *testing.T) *recovery {
	fake := slacktest.NewServer(slacktest.PostMessageLimit(0, 1), slacktest.ReadLimit(0, 1))
	t.Cleanup(fake.Close)
	conn, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken, SigningSecret: secret,
		APIURL: fake.APIURL(), PostSpacing: time.Microsecond, UpdateEvery: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return &recovery{t: t, fake: fake, conn: conn, db: db, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func (r *recovery) enqueue(es ...threads.Effect) {
	r.t.Helper()
	if err := r.db.Update(context.Background(), func(tx store.Tx) error {
		for _, e := range es {
			if err := threads.Enqueue(tx, e); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
}

// deliver drains the outbox with a new Deliverer (a restart) and returns the
// Web API calls it made: posts, history and replies lookups.
func (r *recovery) deliver() (posts, history, replies int) {
	r.t.Helper()
	p0, h0, r0 := r.fake.Calls("chat.postMessage"), r.fake.Calls("conversations.history"), r.fake.Calls("conversations.replies")
	d := threads.NewDeliverer(r.db, clock.Real{}, r.log, r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Flush(ctx); err != nil {
		r.t.Fatal(err)
	}
	return r.fake.Calls("chat.postMessage") - p0, r.fake.Calls("conversations.history") - h0, r.fake.Calls("conversations.replies") - r0
}

func (r *recovery) thread(id string) chat.ThreadRef {
	r.t.Helper()
	var t chat.ThreadRef
	if err := r.db.View(context.Background(), func(tx store.Tx) (err error) {
		t, err = threads.ThreadRef(tx, chat.Slack, id)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return t
}

func parentEffect(id string) threads.Effect {
	return threads.Effect{Op: threads.OpThread, Request: id, Surface: chat.Slack, Channel: channel, Save: threads.ParentRef(id),
		Message: chat.Message{Request: id, Kind: "parent", Card: &chat.Card{Title: id + " · coder", Status: "pending"},
			IdempotencyKey: chat.Slack + "/" + threads.ParentRef(id)}}
}

func replyEffect(id, text string) threads.Effect {
	return threads.Effect{Op: threads.OpReply, Request: id, Surface: chat.Slack,
		Message: chat.Message{Request: id, Kind: "reply", Text: text, IdempotencyKey: "test/" + id + "/" + text}}
}

// What recovery costs: a post delivered normally makes no lookup; each
// effect in doubt (first of its thread at the restart) makes one lookup of
// one call (two when more than 200 messages of the channel are newer),
// posts nothing when the post is there, and posts once when it is not.
// Beyond the bound (400 newer top-level messages) a parent is not found and
// is posted again: the window left.
func TestRecoveryCost(t *testing.T) {
	const n = 20
	r := newRecovery(t)
	ctx := context.Background()
	ids := func(prefix string) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%02d", prefix, i))
		}
		return out
	}

	// n parents, posted by a Deliverer already running (not in doubt).
	d := threads.NewDeliverer(r.db, clock.Real{}, r.log, r.conn)
	if _, err := d.DeliverOnce(ctx); err != nil { // its term begins with an empty outbox
		t.Fatal(err)
	}
	for _, id := range ids("R") {
		r.enqueue(parentEffect(id))
	}
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if h, rp := r.fake.Calls("conversations.history"), r.fake.Calls("conversations.replies"); h+rp != 0 ||
		r.fake.Calls("chat.postMessage") != n {
		t.Fatalf("%d normal posts made %d lookups", r.fake.Calls("chat.postMessage"), h+rp)
	}

	// n answers in doubt that had gone out before the crash.
	for _, id := range ids("R") {
		e := replyEffect(id, "answer")
		if _, err := r.conn.Reply(ctx, r.thread(id), e.Message); err != nil {
			t.Fatal(err)
		}
		r.enqueue(e)
	}
	posts, hist, rep := r.deliver()
	t.Logf("%d replies in doubt, posted before the crash: %d posts, %d history, %d replies calls", n, posts, hist, rep)
	if posts != 0 || hist != 0 || rep != n {
		t.Errorf("want 0 posts and %d conversations.replies calls", n)
	}
	// n answers in doubt that had not gone out: each posted once.
	for _, id := range ids("R") {
		r.enqueue(replyEffect(id, "more"))
	}
	posts, hist, rep = r.deliver()
	t.Logf("%d replies in doubt, not posted before the crash: %d posts, %d history, %d replies calls", n, posts, hist, rep)
	if posts != n || hist != 0 || rep != n {
		t.Errorf("want %d posts and %d conversations.replies calls", n, n)
	}
	for _, id := range ids("R") {
		if got := r.fake.Thread(channel, r.thread(id).ID); len(got) != 3 || got[1].Text != "answer" || got[2].Text != "more" {
			t.Errorf("%s: thread %+v, want the parent, answer and more once each", id, got)
		}
	}

	// n parents in doubt that had gone out: found, their ts recorded.
	posted := map[string]string{}
	for _, id := range ids("S") {
		e := parentEffect(id)
		tref, _, err := r.conn.StartThread(ctx, channel, e.Message)
		if err != nil {
			t.Fatal(err)
		}
		posted[id] = tref.ID
		r.enqueue(e)
	}
	posts, hist, rep = r.deliver()
	t.Logf("%d parents in doubt, posted before the crash: %d posts, %d history, %d replies calls", n, posts, hist, rep)
	if posts != 0 || hist != n || rep != 0 {
		t.Errorf("want 0 posts and %d conversations.history calls", n)
	}
	for id, ts := range posted {
		if got := r.thread(id); got.ID != ts {
			t.Errorf("%s: thread %s recorded, want the parent found %s", id, got.ID, ts)
		}
	}

	// An approval card in a DM that had gone out: found in the DM's history.
	dm := threads.Effect{Op: threads.OpDirect, Request: "R00", Surface: chat.Slack, User: owner, Save: "approval/1/dm/" + owner,
		Message: chat.Message{Request: "R00", Kind: "approval", Text: "decide?", IdempotencyKey: "slack/approval/1/dm/" + owner}}
	sent, err := r.conn.Direct(ctx, owner, dm.Message)
	if err != nil {
		t.Fatal(err)
	}
	r.enqueue(dm)
	posts, hist, rep = r.deliver()
	t.Logf("a direct message in doubt, posted before the crash: %d posts, %d history calls", posts, hist)
	var saved chat.MessageRef
	if err := r.db.View(ctx, func(tx store.Tx) (err error) {
		saved, err = threads.MessageRef(tx, chat.Slack, dm.Save)
		return err
	}); err != nil || saved != sent || posts != 0 || hist != 1 || rep != 0 {
		t.Errorf("direct message recorded %+v (%v), want %+v found with 1 history call and no post", saved, err, sent)
	}

	// A parent behind 250 newer top-level messages: two pages, found; behind
	// 450: beyond the bound, posted again.
	for _, c := range []struct {
		newer, posts, calls int
	}{{250, 0, 2}, {450, 1, 2}} {
		id := fmt.Sprintf("T%d", c.newer)
		e := parentEffect(id)
		if _, _, err := r.conn.StartThread(ctx, channel, e.Message); err != nil {
			t.Fatal(err)
		}
		for i := range c.newer {
			if _, err := r.fake.AddUserMessage(channel, member, fmt.Sprintf("chatter %d", i), ""); err != nil {
				t.Fatal(err)
			}
		}
		r.enqueue(e)
		posts, hist, rep = r.deliver()
		t.Logf("a parent in doubt behind %d newer messages: %d posts, %d history calls", c.newer, posts, hist)
		if posts != c.posts || hist != c.calls || rep != 0 {
			t.Errorf("want %d posts and %d conversations.history calls", c.posts, c.calls)
		}
	}
}
