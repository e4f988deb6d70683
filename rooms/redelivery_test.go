package rooms_test

import (
	"context"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
)

// A platform's redelivery of a command that changes state (the same event
// ID) does not run it again, on this router or a new one over the same
// store (a restart): it is a duplicate, answered with nothing and audited
// nowhere, not "R-07 has already ended". A command without an event ID (the
// console's) runs every time.
func TestRedeliveredCommandRunsOnce(t *testing.T) {
	ctx := context.Background()
	f := newRoomFixture(t)
	r, err := f.svc.Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: alice, Text: "work"})
	if err != nil {
		t.Fatal(err)
	}
	cancel := chat.Event{Kind: chat.Command, Surface: chat.Console, ID: "ev1", Channel: "main", User: alice, Text: "cancel " + r.ID.String()}
	if resp := f.rt.Handle(ctx, cancel); resp.Error || !strings.HasSuffix(resp.Text, " cancelled") {
		t.Fatalf("cancel: %+v, want it cancelled", resp)
	}
	for _, rt := range []*rooms.Router{f.rt, roomFixtureOn(f.db, f.clk).rt} { // this router, and one after a restart
		if resp := rt.Handle(ctx, cancel); resp != (chat.Response{}) {
			t.Errorf("the redelivery answered %+v, want nothing (a duplicate)", resp)
		}
	}
	recs, err := audit.List(ctx, f.db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if strings.HasSuffix(rec.Action, "_refused") {
			t.Errorf("a refusal was audited: %+v", rec)
		}
	}
	cancel.ID = ""
	if resp := f.rt.Handle(ctx, cancel); !resp.Error || !strings.Contains(resp.Text, "has already ended") {
		t.Errorf("a command without an event ID again: %+v, want it run (already ended)", resp)
	}
}
