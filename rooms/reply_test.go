package rooms_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/console"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/threads"
)

// TestReplyInThread: a message in a request's thread reaches that request's
// agent once (a platform redelivery delivers nothing more), a message in any
// other thread is ignored, and a reply to an ended request is refused.
func TestReplyInThread(t *testing.T) {
	ctx := context.Background()
	f := newRoomFixture(t)
	db, svc, rt, log := f.db, f.svc, f.rt, f.log
	con := console.New(nil, io.Discard, "main", "alice")
	deliver := threads.NewDeliverer(db, f.clk, log, con)

	r, err := svc.Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: "console:alice", Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deliver.DeliverOnce(ctx); err != nil { // posts the thread parent, recording its ref
		t.Fatal(err)
	}
	thread := &chat.ThreadRef{Surface: chat.Console, Channel: "main", ID: r.ID.String()}
	reply := chat.Event{Kind: chat.Reply, Surface: chat.Console, ID: "ev1", Channel: "main", User: "console:alice", Text: "use staging", Thread: thread}
	for i := 0; i < 2; i++ { // the second is a redelivery
		if resp := rt.Handle(ctx, reply); resp.Error {
			t.Fatalf("reply refused: %s", resp.Text)
		}
	}
	other := reply
	other.ID, other.Thread = "ev2", &chat.ThreadRef{Surface: chat.Console, Channel: "main", ID: "not-a-request"}
	if resp := rt.Handle(ctx, other); resp.Text != "" {
		t.Errorf("a message in another thread got an answer: %+v", resp)
	}
	recs, err := audit.List(ctx, db, audit.Query{RequestID: r.ID.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if rec.Action == "reply" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d reply records, want exactly 1 (redelivery deduplicated)", n)
	}

	if _, err := svc.Apply(ctx, r.ID, requests.Change{Event: requests.Cancel, Actor: "console:alice"}); err != nil {
		t.Fatal(err)
	}
	late := reply
	late.ID = "ev3"
	if resp := rt.Handle(ctx, late); !resp.Error {
		t.Errorf("a reply to an ended request was accepted: %+v", resp)
	}
	all, err := audit.List(ctx, db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, rec := range all {
		if rec.Action == "reply_refused" && rec.Actor == "console:alice" {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d reply_refused audit records, want 1", refused)
	}
}

// TestRetryRedelivered: a platform's redelivery of a "retry" mention makes
// no second request: the retry is deduplicated by the event's ID like an
// ask, and the redelivery gets no answer.
func TestRetryRedelivered(t *testing.T) {
	ctx := context.Background()
	f := newRoomFixture(t)
	svc, rt := f.svc, f.rt
	r, err := svc.Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: "console:alice", Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, r.ID, requests.Change{Event: requests.Cancel, Actor: "console:alice"}); err != nil {
		t.Fatal(err)
	}
	ev := chat.Event{Kind: chat.Ask, Surface: chat.Console, ID: "ev9", Channel: "main", User: "console:alice", Text: "retry " + r.ID.String()}
	first := rt.Handle(ctx, ev)
	if first.Error || !strings.Contains(first.Text, "retry of "+r.ID.String()) {
		t.Fatalf("retry: %+v", first)
	}
	if again := rt.Handle(ctx, ev); again.Text != "" || again.Error {
		t.Errorf("the redelivery got an answer: %+v", again)
	}
	all, err := svc.List(ctx, requests.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("%d requests after a retry and its redelivery, want 2", len(all))
	}
	ev.ID = "ev10" // another event: another retry
	if resp := rt.Handle(ctx, ev); resp.Error {
		t.Fatalf("a second retry: %+v", resp)
	}
	if all, _ = svc.List(ctx, requests.Filter{}); len(all) != 3 {
		t.Errorf("%d requests after a second retry event, want 3", len(all))
	}
}
