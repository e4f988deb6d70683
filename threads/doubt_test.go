package threads_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// board is a fake platform without idempotency keys that can look up its
// posts by key (a chat.Finder, like Slack with message metadata). A post
// can go out and have its answer lost, like a post Slack took just before
// the bridge stopped.
type board struct {
	mu      sync.Mutex
	n       int
	posts   []post           // every post that went out
	lookups []chat.Lookup    // every lookup
	lose    map[string]bool  // text → posted, but the answer is lost
	fail    map[string]error // text → not posted: this error (once)
	findErr []error          // what the next lookups fail with
	updates []string         // "<message ID> <text>"
}

type post struct {
	text, key string
	ref       chat.MessageRef
}

const surface = "board"

func newBoard() *board { return &board{lose: map[string]bool{}, fail: map[string]error{}} }

func (b *board) Surface() string                               { return surface }
func (b *board) Run(ctx context.Context, _ chat.Handler) error { <-ctx.Done(); return nil }

func (b *board) post(channel string, m chat.Message) (chat.MessageRef, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	text := m.Text
	if m.Card != nil {
		text = m.Card.Title
	}
	if err := b.fail[text]; err != nil {
		delete(b.fail, text)
		return chat.MessageRef{}, err
	}
	b.n++
	ref := chat.MessageRef{Surface: surface, Channel: channel, ID: fmt.Sprintf("m%d", b.n)}
	b.posts = append(b.posts, post{text: text, key: m.IdempotencyKey, ref: ref})
	if b.lose[text] {
		delete(b.lose, text)
		return chat.MessageRef{}, errors.New("connection reset before the answer")
	}
	return ref, nil
}

func (b *board) StartThread(_ context.Context, channel string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	ref, err := b.post(channel, m)
	return chat.ThreadRef{Surface: surface, Channel: channel, ID: ref.ID}, ref, err
}

func (b *board) Reply(_ context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	return b.post(t.Channel, m)
}

func (b *board) Direct(_ context.Context, user string, m chat.Message) (chat.MessageRef, error) {
	return b.post("dm-"+user, m)
}

func (b *board) Update(_ context.Context, ref chat.MessageRef, m chat.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.updates = append(b.updates, ref.ID+" "+m.Card.Status)
	return nil
}

func (b *board) FindPosted(_ context.Context, l chat.Lookup) (chat.MessageRef, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lookups = append(b.lookups, l)
	if len(b.findErr) > 0 {
		err := b.findErr[0]
		b.findErr = b.findErr[1:]
		return chat.MessageRef{}, false, err
	}
	for _, p := range b.posts {
		if p.key == l.Key {
			return p.ref, true, nil
		}
	}
	return chat.MessageRef{}, false, nil
}

// texts is the text of every post, in order.
func (b *board) texts() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, p := range b.posts {
		out = append(out, p.text)
	}
	return out
}

// posted is the post of text.
func (b *board) posted(text string) post {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.posts {
		if p.text == text {
			return p
		}
	}
	return post{}
}

func (b *board) lookupCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lookups)
}

type doubtFixture struct {
	t   *testing.T
	db  *bolt.DB
	clk *clock.Fake
	b   *board
	log *slog.Logger
}

func newDoubtFixture(t *testing.T) *doubtFixture {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &doubtFixture{t: t, db: db, clk: clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), b: newBoard(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// deliverer is a new Deliverer: a process started anew, or a new leader.
func (f *doubtFixture) deliverer() *threads.Deliverer {
	return threads.NewDeliverer(f.db, f.clk, f.log, f.b)
}

func (f *doubtFixture) enqueue(es ...threads.Effect) {
	f.t.Helper()
	if err := f.db.Update(context.Background(), func(tx store.Tx) error {
		for _, e := range es {
			e.Surface = surface
			if err := threads.Enqueue(tx, e); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
}

func parent(id string) threads.Effect {
	return threads.Effect{Op: threads.OpThread, Request: id, Channel: "C1", Save: threads.ParentRef(id),
		Message: chat.Message{Request: id, Kind: "parent", Card: &chat.Card{Title: id}}}
}

func reply(id, text string) threads.Effect {
	return threads.Effect{Op: threads.OpReply, Request: id, Message: chat.Message{Request: id, Kind: "reply", Text: text}}
}

func status(id, s string) threads.Effect {
	return threads.Effect{Op: threads.OpUpdate, Request: id, Ref: threads.ParentRef(id),
		Message: chat.Message{Request: id, Kind: "parent", Card: &chat.Card{Title: id, Status: s}}}
}

// round makes one delivery round and moves the clock to the next retry.
func (f *doubtFixture) round(d *threads.Deliverer) {
	f.t.Helper()
	next, err := d.DeliverOnce(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	if !next.IsZero() {
		f.clk.Set(next)
	}
}

// Only effects in doubt are looked up: the first of each thread when a
// Deliverer starts, and one whose last attempt may have posted (not one
// refused with a rate limit). Everything else is posted without a lookup.
func TestOnlyPostsInDoubtAreLookedUp(t *testing.T) {
	f := newDoubtFixture(t)
	f.enqueue(parent("A"), reply("A", "a1"), parent("B"), status("B", "running"))
	d := f.deliverer()
	f.round(d)
	if got, want := f.b.texts(), []string{"A", "B", "a1"}; !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("posts %q, want %q (threads in parallel)", got, want)
	}
	if n := f.b.lookupCount(); n != 2 {
		t.Fatalf("%d lookups at the start, want 2 (the parents of A and B, first of their threads)", n)
	}
	for _, l := range f.b.lookups {
		if l.Channel != "C1" || (l.Key != "board/A/parent" && l.Key != "board/B/parent") || l.Since.IsZero() {
			t.Errorf("lookup %+v", l)
		}
	}

	// Later effects: no lookup.
	f.enqueue(reply("A", "a2"), reply("B", "b1"))
	f.round(d)
	if n := f.b.lookupCount(); n != 2 {
		t.Fatalf("%d lookups after normal posts, want still 2", n)
	}

	// A post that went out with its answer lost: the retry finds it and
	// posts nothing; its key is the one the post carried.
	f.b.lose["a3"] = true
	f.enqueue(reply("A", "a3"))
	f.round(d)
	f.round(d)
	if got := f.b.texts(); len(got) != 6 || got[5] != "a3" {
		t.Fatalf("posts %q: want a3 once", got)
	}
	if n := f.b.lookupCount(); n != 3 || f.b.lookups[2].Key != f.b.posts[5].key || f.b.lookups[2].Thread == nil ||
		f.b.lookups[2].Thread.ID != f.b.posted("A").ref.ID {
		t.Fatalf("lookups %+v after a lost answer (post %+v)", f.b.lookups, f.b.posts[5])
	}

	// A rate limit says nothing went out: the retry makes no lookup.
	f.b.fail["a4"] = &chat.RetryAfterError{After: time.Second, Err: errors.New("429")}
	f.enqueue(reply("A", "a4"))
	f.round(d)
	f.round(d)
	if got := f.b.texts(); got[len(got)-1] != "a4" || f.b.lookupCount() != 3 {
		t.Fatalf("posts %q, %d lookups: want a4 posted after the wait without a lookup", got, f.b.lookupCount())
	}

	// A new Deliverer (a restart): the first pending effect of each thread
	// is looked up, the one behind it is not.
	f.b.fail["a5"] = errors.New("503") // held back: it is pending at the restart
	f.enqueue(reply("A", "a5"), reply("A", "a6"))
	f.round(d)
	d = f.deliverer()
	f.round(d)
	if got := f.b.texts(); !slices.Equal(got[len(got)-2:], []string{"a5", "a6"}) || f.b.lookupCount() != 4 {
		t.Fatalf("posts %q, %d lookups after the restart: want a5 looked up, a6 not", got, f.b.lookupCount())
	}
	if n := pendingEffects(t, f.db); n != 0 {
		t.Errorf("%d effects left", n)
	}
}

// A parent found is recorded as if just posted: later replies and status
// edits go to it, and nothing is posted twice. So are a reply and a direct
// message found, under the names they are saved as.
func TestPostFoundIsRecorded(t *testing.T) {
	f := newDoubtFixture(t)
	ctx := context.Background()
	// The parent went out before a crash: the board has it, the store does not.
	f.b.lose["R1"] = true
	f.enqueue(parent("R1"))
	f.round(f.deliverer())
	f.enqueue(status("R1", "running"), reply("R1", "hello"))

	f.round(f.deliverer()) // restarted
	if got := f.b.texts(); !slices.Equal(got, []string{"R1", "hello"}) {
		t.Fatalf("posts %q: want the parent once", got)
	}
	var tref chat.ThreadRef
	if err := f.db.View(ctx, func(tx store.Tx) (err error) {
		tref, err = threads.ThreadRef(tx, surface, "R1")
		return err
	}); err != nil || tref.ID != f.b.posts[0].ref.ID {
		t.Fatalf("thread recorded %+v (%v), want the parent found %s", tref, err, f.b.posts[0].ref.ID)
	}
	if got := f.b.updates; !slices.Equal(got, []string{f.b.posts[0].ref.ID + " running"}) {
		t.Errorf("updates %q: want the status on the parent found", got)
	}

	// A direct message saved under a name, found after a lost answer.
	f.b.lose["decide?"] = true
	f.enqueue(threads.Effect{Op: threads.OpDirect, Request: "R1", User: "U9", Save: "approval/1/dm/U9",
		Message: chat.Message{Request: "R1", Kind: "approval", Text: "decide?"}})
	d := f.deliverer()
	f.round(d)
	f.round(d)
	var mref chat.MessageRef
	if err := f.db.View(ctx, func(tx store.Tx) (err error) {
		mref, err = threads.MessageRef(tx, surface, "approval/1/dm/U9")
		return err
	}); err != nil || len(f.b.posts) != 3 || mref != f.b.posts[2].ref {
		t.Fatalf("direct message recorded %+v (%v); posts %+v", mref, err, f.b.posts)
	}
	if l := f.b.lookups[len(f.b.lookups)-1]; l.User != "U9" || l.Key != "board/approval/1/dm/U9" {
		t.Errorf("lookup %+v", l)
	}
}

// A lookup that fails posts anyway (at least once), and says so in the log;
// one refused with a rate limit is made again after the wait, and posts
// nothing when it finds the post.
func TestLookupFailure(t *testing.T) {
	f := newDoubtFixture(t)
	var logs syncLog
	f.log = slog.New(slog.NewTextHandler(&logs, nil))
	f.enqueue(parent("R1"))
	f.b.findErr = []error{errors.New("missing_scope")}
	f.round(f.deliverer())
	if got := f.b.texts(); !slices.Equal(got, []string{"R1"}) || f.b.lookupCount() != 1 {
		t.Fatalf("posts %q after %d lookups, want the parent posted once after a failed lookup", got, f.b.lookupCount())
	}
	if !logs.contains("looking for a post in doubt failed; posting it") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}

	f.b.lose["hi"] = true
	f.enqueue(reply("R1", "hi"))
	d := f.deliverer()
	f.round(d) // first of its thread at the start: looked up (not there), posted, answer lost
	f.b.findErr = []error{&chat.RetryAfterError{After: 3 * time.Second, Err: errors.New("429")}}
	before := f.clk.Now()
	f.round(d) // the lookup is rate limited: nothing posted, retried in 3 s
	if got := f.clk.Now().Sub(before); got != 3*time.Second || len(f.b.texts()) != 2 {
		t.Fatalf("after a rate-limited lookup: next try in %v, posts %q", got, f.b.texts())
	}
	f.round(d)
	if got := f.b.texts(); !slices.Equal(got, []string{"R1", "hi"}) || f.b.lookupCount() != 4 {
		t.Fatalf("posts %q after %d lookups: want hi once", got, f.b.lookupCount())
	}
	if n := pendingEffects(t, f.db); n != 0 {
		t.Errorf("%d effects left", n)
	}
}

func pendingEffects(t *testing.T, db store.Store) int {
	t.Helper()
	var n int
	if err := db.View(context.Background(), func(tx store.Tx) error {
		e, err := store.PendingEffects(tx, 0)
		n = len(e)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

type syncLog struct {
	mu sync.Mutex
	b  []byte
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *syncLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return string(l.b) }

func (l *syncLog) contains(s string) bool { return strings.Contains(l.String(), s) }

// Each Run begins a term (a leader's): the same Deliverer leading again
// looks up the first effect of each thread, even one that was only held back
// by a rate limit in its previous term (another leader may have posted it
// meanwhile).
func TestRunBeginsATerm(t *testing.T) {
	f := newDoubtFixture(t)
	f.enqueue(parent("A"))
	d := f.deliverer()
	f.round(d)
	f.b.fail["a1"] = &chat.RetryAfterError{After: time.Second, Err: errors.New("429")}
	f.enqueue(reply("A", "a1"))
	f.round(d) // held back, not in doubt; the clock moves to its retry
	if n := f.b.lookupCount(); n != 1 {
		t.Fatalf("%d lookups, want 1 (the parent, first at the start)", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for pendingEffects(t, f.db) != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the store for the condition, with a deadline
	}
	cancel()
	<-done
	if got := f.b.texts(); !slices.Equal(got, []string{"A", "a1"}) || f.b.lookupCount() != 2 {
		t.Fatalf("posts %q after %d lookups: want a1 looked up, then posted once", got, f.b.lookupCount())
	}
}
