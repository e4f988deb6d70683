package threads_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// platform is a fake chat surface: it records what reaches it and fails on
// demand, like a platform API would.
type platform struct {
	mu      sync.Mutex
	calls   []string
	failing map[string]error // op → error to return once
}

func (p *platform) Surface() string                               { return chat.Console }
func (p *platform) Run(ctx context.Context, _ chat.Handler) error { <-ctx.Done(); return nil }

func (p *platform) record(op, detail string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failing[op]; err != nil {
		delete(p.failing, op)
		return err
	}
	p.calls = append(p.calls, op+" "+detail)
	return nil
}

func (p *platform) StartThread(_ context.Context, ch string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	if err := p.record("thread", m.Request); err != nil {
		return chat.ThreadRef{}, chat.MessageRef{}, err
	}
	return chat.ThreadRef{Surface: chat.Console, Channel: ch, ID: m.Request}, chat.MessageRef{Surface: chat.Console, Channel: ch, ID: m.Request + "/p"}, nil
}

func (p *platform) Reply(_ context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	return chat.MessageRef{ID: "r"}, p.record("reply", t.ID+" "+m.Text)
}

func (p *platform) Update(_ context.Context, ref chat.MessageRef, m chat.Message) error {
	return p.record("update", ref.ID+" "+m.Card.Status)
}

func (p *platform) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

type fixture struct {
	db  *bolt.DB
	svc *requests.Service
	th  *threads.Threads
	clk *clock.Fake
	p   *platform
	d   *threads.Deliverer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	svc := requests.NewService(db, clk, "acme", []string{"console:alice"})
	th := threads.New(directory.New([]config.Room{{Name: "main", Console: true, Agents: []string{"coder"}}}, []string{"console:alice"}, chat.Console))
	svc.AddObserver("threads", th.Observe)
	p := &platform{failing: map[string]error{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &fixture{db: db, svc: svc, th: th, clk: clk, p: p, d: threads.NewDeliverer(db, clk, log, p)}
}

func (f *fixture) create(t testing.TB) *requests.Request {
	t.Helper()
	r, err := f.svc.Create(context.Background(), requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: "console:alice", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) pending(t testing.TB) int {
	t.Helper()
	var n int
	_ = f.db.View(context.Background(), func(tx store.Tx) error {
		e, err := store.PendingEffects(tx, 0)
		n = len(e)
		return err
	})
	return n
}

func TestDeliverInOrderAndCoalesce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := f.create(t)
	// Three status changes before delivery: only the newest is sent.
	for _, ev := range []requests.Event{requests.Start} {
		if _, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: ev, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pct := range []int{10, 50} {
		err := f.db.Update(ctx, func(tx store.Tx) error {
			_, err := f.svc.UpdateTx(tx, r.ID, "t", "", "", func(r *requests.Request) { r.Progress = pct })
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Finish, Actor: "t", Mutate: func(r *requests.Request) { r.Result = "42" }}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.DeliverOnce(ctx); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{"thread " + r.ID.String(), "reply " + r.ID.String() + " 42", "update " + r.ID.String() + "/p done"})
	if got := fmt.Sprint(f.p.Calls()); got != want {
		t.Errorf("delivered %s\nwant      %s (intermediate statuses coalesced away)", got, want)
	}
	if n := f.pending(t); n != 0 {
		t.Errorf("%d effects left in the outbox", n)
	}
}

func TestDeliveryFailureKeepsOrderAndRetries(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := f.create(t)
	f.p.failing["thread"] = errors.New("503 service unavailable")
	if _, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start, Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	next, err := f.d.DeliverOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.p.Calls()) != 0 {
		t.Fatalf("the update was sent before its thread existed: %v", f.p.Calls())
	}
	if next.IsZero() || next.Sub(f.clk.Now()) <= 0 {
		t.Fatalf("no retry scheduled: next = %v", next)
	}
	recs, _ := audit.List(ctx, f.db, audit.Query{RequestID: r.ID.String()}, 0)
	var failed int
	for _, rec := range recs {
		if rec.Action == "delivery_failed" {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d delivery_failed audit records, want 1", failed)
	}
	// Before the back-off ends nothing is retried; after it, all goes in order.
	if _, err := f.d.DeliverOnce(ctx); err != nil || len(f.p.Calls()) != 0 {
		t.Fatalf("retried before its back-off: %v %v", f.p.Calls(), err)
	}
	f.clk.Set(next)
	if _, err := f.d.DeliverOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(f.p.Calls()); got != fmt.Sprintf("[thread %s update %s/p running]", r.ID, r.ID) {
		t.Errorf("after retry delivered %s", got)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.create(t)
	f.p.failing["thread"] = &chat.RetryAfterError{After: 7 * time.Second, Err: errors.New("429")}
	next, err := f.d.DeliverOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Sub(f.clk.Now()); got != 7*time.Second {
		t.Errorf("retry in %v, want exactly the platform's 7s", got)
	}
}

// TestParentNeverPostedTwice: a second thread effect for a request whose
// parent is recorded (a redelivery after a restart) posts nothing.
func TestParentNeverPostedTwice(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := f.create(t)
	if _, err := f.d.DeliverOnce(ctx); err != nil {
		t.Fatal(err)
	}
	err := f.db.Update(ctx, func(tx store.Tx) error {
		return threads.Enqueue(tx, threads.Effect{Op: threads.OpThread, Request: r.ID.String(), Surface: chat.Console,
			Channel: "main", Save: threads.ParentRef(r.ID.String()), Message: threads.Parent(r)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.DeliverOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(f.p.Calls()); got != 1 {
		t.Errorf("parent posted %d times: %v", got, f.p.Calls())
	}
	if n := f.pending(t); n != 0 {
		t.Errorf("%d effects left", n)
	}
}

func TestRunWakesOnEnqueue(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.d.Run(ctx); close(done) }()
	r := f.create(t)
	deadline := time.Now().Add(10 * time.Second)
	for len(f.p.Calls()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the fake platform for the condition, with a deadline
	}
	if got := f.p.Calls(); len(got) != 1 || got[0] != "thread "+r.ID.String() {
		t.Errorf("Run delivered %v", got)
	}
	cancel()
	<-done
}
