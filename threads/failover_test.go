package threads_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/slack"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"github.com/roombridge/roombridge/threads"
)

// instance is one bridge of an HA pair, built as cmd/bridge builds it: its
// own etcd client, an election, and the etcd store fenced by it.
type instance struct {
	store *etcd.Store
	leads chan struct{} // closed when it starts to lead
	stop  context.CancelFunc
	done  chan struct{} // closed when its election has ended (resigned)
}

func startInstance(t *testing.T, srv *etcdtest.Server, name string) *instance {
	t.Helper()
	cli := srv.Client(t)
	l, err := election.New(election.Options{Client: cli, Prefix: "/rb/leader", TTL: 2 * time.Second, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	st, err := etcd.New(cli, etcd.Options{Prefix: "/rb/store", Fence: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{store: st, leads: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		_ = l.Run(ctx, func(tctx context.Context) error {
			close(in.leads)
			<-tctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-in.done })
	return in
}

// claim is the claim cmd/bridge fences the outbox with: an empty Update of
// the fenced store.
func (in *instance) claim(ctx context.Context) error {
	return in.store.Update(ctx, func(store.Tx) error { return nil })
}

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestFailoverPostInDoubtPostedOnce: the leader's Slack post of a thread
// parent went out, and the leader stopped before recording it. The next
// leader's outbox, sending through the fenced Slack connector, finds the
// parent (the lookup a fence used to hide) and records it: one parent in
// Slack. The old leader, deposed, can post nothing through its fence.
func TestFailoverPostInDoubtPostedOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startInstance(t, srv, "a")
	wait(t, a.leads, "a to lead")
	b := startInstance(t, srv, "b")

	fake := slacktest.NewServer(slacktest.PostMessageLimit(0, 1), slacktest.ReadLimit(0, 1))
	t.Cleanup(fake.Close)
	conn, err := slack.New(slack.Options{Mode: slack.ModeEvents, BotToken: slacktest.DefaultBotToken, SigningSecret: "secret",
		APIURL: fake.APIURL(), PostSpacing: time.Microsecond, UpdateEvery: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// a queues the parent and Slack takes it; a stops before recording it.
	e := parent("R1")
	e.Surface = chat.Slack
	e.Message.IdempotencyKey = chat.Slack + "/" + threads.ParentRef("R1")
	if err := a.store.Update(ctx, func(tx store.Tx) error { return threads.Enqueue(tx, e) }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.StartThread(ctx, e.Channel, e.Message); err != nil {
		t.Fatal(err)
	}
	a.stop()
	wait(t, a.done, "a to resign")
	wait(t, b.leads, "b to lead")

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := threads.NewDeliverer(b.store, clock.Real{}, log, threads.Fenced(conn, b.claim))
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var parents []slacktest.Message
	for _, m := range fake.Messages() {
		if m.Channel == e.Channel && m.ThreadTS == "" {
			parents = append(parents, m)
		}
	}
	if len(parents) != 1 || fake.Calls("chat.postMessage") != 1 {
		t.Fatalf("%d parents in Slack after %d chat.postMessage calls, want 1 and 1", len(parents), fake.Calls("chat.postMessage"))
	}
	var tref chat.ThreadRef
	if err := b.store.View(ctx, func(tx store.Tx) (err error) {
		tref, err = threads.ThreadRef(tx, chat.Slack, "R1")
		return err
	}); err != nil || tref.ID != parents[0].TS {
		t.Errorf("thread recorded %+v (%v), want the parent %s", tref, err, parents[0].TS)
	}

	// The deposed leader's fence refuses: nothing more reaches Slack.
	if _, err := threads.Fenced(conn, a.claim).Reply(ctx, tref, chat.Message{Request: "R1", Kind: "reply", Text: "late"}); err == nil {
		t.Error("a reply through the deposed leader's fence went out")
	}
	if n := fake.Calls("chat.postMessage"); n != 1 {
		t.Errorf("%d chat.postMessage calls, want 1", n)
	}
}
