package requests_test

import (
	"context"
	"errors"
	"testing"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// ApplyReadTx uses a request read in an earlier transaction while the record
// is unchanged, and the stored record once it changed: a stale read never
// undoes what was written in between, nor applies an illegal transition.
func TestApplyReadTxRereadsAChangedRequest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	read := func(id requests.ID) requests.Read {
		var rd requests.Read
		if err := f.db.View(ctx, func(tx store.Tx) error {
			var err error
			rd, err = f.svc.ReadTx(tx, id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return rd
	}
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
