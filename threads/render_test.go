package threads_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// parents returns the parent messages queued in the outbox for request id
// (the thread's first post, then its coalesced status edit), oldest first.
func (f *fixture) parents(t *testing.T, id requests.ID) []chat.Message {
	t.Helper()
	var out []chat.Message
	err := f.db.View(context.Background(), func(tx store.Tx) error {
		effs, err := store.PendingEffects(tx, 0)
		if err != nil {
			return err
		}
		for _, se := range effs {
			var e threads.Effect
			if err := json.Unmarshal(se.Payload, &e); err != nil {
				return err
			}
			if e.Request == id.String() && (e.Op == threads.OpThread || e.Op == threads.OpUpdate) && e.Message.Kind == "parent" {
				out = append(out, e.Message)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) lastStatus(t *testing.T, id requests.ID) string {
	t.Helper()
	ps := f.parents(t, id)
	if len(ps) == 0 {
		t.Fatalf("no parent of %s queued", id)
	}
	return ps[len(ps)-1].Card.Status
}

func (f *fixture) setWaiting(t *testing.T, th *threads.Threads, id requests.ID, text string) {
	t.Helper()
	err := f.db.Update(context.Background(), func(tx store.Tx) error {
		r, err := f.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		return th.SetWaitingTx(tx, r, text)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWaitingStatus: what a request waits on is recorded in the store and
// shown in its status line through the outbox, in place of the scheduler's
// generic "waiting…" activity; a Threads made after a restart renders it
// too; setting the same text again queues nothing; clearing it removes it.
func TestWaitingStatus(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := f.create(t)
	if _, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start, Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	f.setWaiting(t, f.th, r.ID, "waiting on R-02 (reviewer)")
	if got := f.lastStatus(t, r.ID); got != "running · waiting on R-02 (reviewer)" {
		t.Errorf("status %q", got)
	}
	n := len(f.parents(t, r.ID))
	f.setWaiting(t, f.th, r.ID, "waiting on R-02 (reviewer)")
	if len(f.parents(t, r.ID)) != n {
		t.Error("the same waiting text queued another edit")
	}

	// A restart: a new Threads over the same store; the agent yields.
	th2 := threads.New(directory.New([]config.Room{{Name: "main", Console: true, Agents: []string{"coder"}}}, []string{"console:alice"}, chat.Console))
	svc2 := requests.NewService(f.db, f.clk, "acme", []string{"console:alice"})
	svc2.AddObserver("threads", th2.Observe)
	err := f.db.Update(ctx, func(tx store.Tx) error {
		_, err := svc2.UpdateTx(tx, r.ID, "t", "yield", "", func(r *requests.Request) { r.Progress, r.Activity = 40, "waiting: on review" })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.lastStatus(t, r.ID); got != "running · 40% · waiting on R-02 (reviewer)" {
		t.Errorf("status after a restart %q", got)
	}
	// Other activity stays beside it.
	err = f.db.Update(ctx, func(tx store.Tx) error {
		_, err := svc2.UpdateTx(tx, r.ID, "t", "", "", func(r *requests.Request) { r.Progress, r.Activity = 0, "reading" })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.lastStatus(t, r.ID); got != "running · reading · waiting on R-02 (reviewer)" {
		t.Errorf("status %q", got)
	}
	f.setWaiting(t, th2, r.ID, "")
	if got := f.lastStatus(t, r.ID); got != "running · reading" {
		t.Errorf("status after clearing %q", got)
	}
}

// TestDelegatedTitle: a delegated request's title names the agent and
// request that asked and the person it is for (with SetRequests), or at
// least the asking request.
func TestDelegatedTitle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.th.SetRequests(f.svc)
	ra := f.create(t)
	rb, err := f.svc.Create(ctx, requests.Ask{Agent: "reviewer", Room: "main", Surface: chat.Console, User: "console:alice",
		Text: "check", DelegatedBy: ra.ID, Approved: true})
	if err != nil {
		t.Fatal(err)
	}
	want := rb.ID.String() + " · reviewer · asked by coder (" + ra.ID.String() + ") for console:alice"
	if ps := f.parents(t, rb.ID); len(ps) != 1 || ps[0].Card.Title != want {
		t.Errorf("parent %+v, want title %q", ps, want)
	}
	if got := threads.Title(rb, ""); got != rb.ID.String()+" · reviewer · asked by "+ra.ID.String()+" for console:alice" {
		t.Errorf("title without the asker's agent: %q", got)
	}
	if got := threads.Title(ra, "x"); got != ra.ID.String()+" · coder · asked by console:alice" {
		t.Errorf("title of a person's ask: %q", got)
	}
}
