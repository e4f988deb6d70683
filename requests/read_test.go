package requests_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// ApplyReadTx uses a request read in an earlier transaction while the record
// is unchanged, and the stored record once it changed: a stale read never
// undoes what was written in between, nor applies an illegal transition.
func TestApplyReadTxRereadsAChangedRequest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	read := func(id requests.ID) requests.Read { return f.read(t, id) }
	apply := func(id requests.ID, rd requests.Read, e requests.Event) (*requests.Request, error) {
		var got *requests.Request
		err := f.db.Update(ctx, func(tx store.Tx) error {
			var err error
			got, err = f.svc.ApplyReadTx(tx, id, rd, requests.Change{Event: e, Actor: "system:ttl"})
			return err
		})
		return got, err
	}

	same := f.create(t, ask("unchanged"))
	got, err := apply(same.ID, read(same.ID), requests.Expire)
	if err != nil || got.State != requests.Expired || got.Version != same.Version+1 {
		t.Fatalf("unchanged: %+v, %v", got, err)
	}

	edited := f.create(t, ask("edited"))
	rd := read(edited.ID)
	if err := f.db.Update(ctx, func(tx store.Tx) error {
		_, err := f.svc.UpdateTx(tx, edited.ID, "", "", "", func(r *requests.Request) { r.Activity = "edited meanwhile" })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got, err = apply(edited.ID, rd, requests.Expire)
	if err != nil || got.State != requests.Expired || got.Activity != "edited meanwhile" || got.Version != edited.Version+2 {
		t.Fatalf("edited between the read and the write: %+v, %v", got, err)
	}

	approved := f.create(t, ask("approved"))
	rd = read(approved.ID)
	f.apply(t, approved.ID, requests.Approve)
	if _, err := apply(approved.ID, rd, requests.Expire); !errors.Is(err, requests.ErrIllegalTransition) {
		t.Fatalf("expiring a request approved since the read: %v, want an illegal transition", err)
	}
	if r, _ := f.svc.Get(ctx, approved.ID); r.State != requests.Approved {
		t.Errorf("approved request is %s", r.State)
	}

	// A read of another request is not used for this one.
	other := f.create(t, ask("other"))
	got, err = apply(other.ID, read(same.ID), requests.Approve)
	if err != nil || got.ID != other.ID || got.Ask != other.Ask || got.State != requests.Approved {
		t.Fatalf("another request's read: %+v, %v", got, err)
	}
}

// A change prepared ahead (PrepareChange) is what ApplyReadTx writes, with
// its audit record, while the request is unchanged; a prepared change that
// is not the one applied (another detail or surface), or a request edited
// since, is computed anew.
func TestApplyReadTxUsesOnlyItsOwnPreparedChange(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	prepared := func(id requests.ID, c requests.Change) requests.Read { return f.svc.PrepareChange(f.read(t, id), c) }
	apply := func(id requests.ID, rd requests.Read, c requests.Change) *requests.Request {
		var got *requests.Request
		if err := f.db.Update(ctx, func(tx store.Tx) error {
			var err error
			got, err = f.svc.ApplyReadTx(tx, id, rd, c)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	expire := func(reason string) requests.Change {
		return requests.Change{Event: requests.Expire, Actor: "system:ttl", Detail: reason,
			Mutate: func(r *requests.Request) { r.Reason = reason }}
	}
	r := f.create(t, ask("prepared"))
	at := f.clk.Now()
	rd := prepared(r.ID, expire("one"))
	f.clk.Advance(time.Minute)
	if got := apply(r.ID, rd, expire("one")); got.Reason != "one" || !got.Updated.Equal(at) {
		t.Fatalf("the prepared change: %+v, want it as prepared at %v", got, at)
	}
	last := func(id requests.ID) audit.Record { recs := auditOf(t, f.db, id); return recs[len(recs)-1] }
	if rec := last(r.ID); rec.Action != "expire" || rec.Detail != "one" || !rec.Time.Equal(at) || rec.From != "pending" || rec.To != "expired" {
		t.Fatalf("the prepared change's audit record: %+v, want it as prepared at %v", rec, at)
	}
	other := f.create(t, ask("other"))
	rd = prepared(other.ID, expire("prepared"))
	if got := apply(other.ID, rd, expire("applied")); got.Reason != "applied" || last(other.ID).Detail != "applied" {
		t.Fatalf("another change than the one prepared wrote %q (audited %+v)", got.Reason, last(other.ID))
	}
	third := f.create(t, ask("third"))
	rd = prepared(third.ID, expire("same"))
	onSlack := expire("same")
	onSlack.Surface = "slack"
	if apply(third.ID, rd, onSlack); last(third.ID).Surface != "slack" {
		t.Fatalf("a change on another surface than the one prepared audited %+v", last(third.ID))
	}
}

// read reads request id in a read transaction of its own (ReadTx).
func (f *fixture) read(t *testing.T, id requests.ID) requests.Read {
	t.Helper()
	var rd requests.Read
	if err := f.db.View(context.Background(), func(tx store.Tx) error {
		var err error
		rd, err = f.svc.ReadTx(tx, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return rd
}
