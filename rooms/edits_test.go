package rooms_test

import (
	"context"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
)

// Edits of an ask that cannot be its new text are not applied, with the
// reason audited (and said in its thread), and change nothing: an empty
// one, one over the size limit, one of a started request; an edit by
// someone else than the asker, one that changes nothing, and one of a
// message that asked nothing are ignored, audited nowhere.
func TestEditsNotApplied(t *testing.T) {
	ctx := context.Background()
	f := newRoomFixture(t)
	f.svc.SetMaxBytes(64)
	ask := chat.Event{Kind: chat.Ask, Surface: chat.Slack, ID: "ev0", Channel: "C1", User: alice, Text: "work", Message: "100.1"}
	r, err := f.svc.Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: alice, Text: "work",
		Origin: requests.Origin(ask.Surface, ask.Channel, ask.Message)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	edit := func(user, text, msg string) {
		t.Helper()
		n++
		ev := chat.Event{Kind: chat.Edit, Surface: chat.Slack, ID: "ev" + string(rune('a'+n)), Channel: "C1", User: user, Text: text, Message: msg}
		if resp := f.rt.Handle(ctx, ev); resp != (chat.Response{}) {
			t.Errorf("edit %q answered %+v, want nothing (the thread says it)", text, resp)
		}
	}
	edit(alice, "   ", "100.1")
	edit(alice, strings.Repeat("x", 65), "100.1")
	edit(bob, "something else", "100.1")
	edit(alice, "coder work", "100.1")
	edit(alice, "other", "100.2")
	if _, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start, Actor: "system:test"}); err != nil {
		t.Fatal(err)
	}
	edit(alice, "late", "100.1")

	got, err := f.svc.Get(ctx, r.ID)
	if err != nil || got.Ask != "work" {
		t.Fatalf("the ask is now %q (%v), want it unchanged", got.Ask, err)
	}
	recs, err := audit.List(ctx, f.db, audit.Query{RequestID: r.ID.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var why []string
	for _, rec := range recs {
		switch rec.Action {
		case "ask_edit_not_applied":
			why = append(why, rec.Detail)
		case "ask_edited":
			t.Errorf("an edit was applied: %+v", rec)
		}
	}
	if len(why) != 3 || !strings.Contains(why[0], "empty") || !strings.Contains(why[1], "too large") && !strings.Contains(why[1], "bytes") ||
		!strings.Contains(why[2], "already started") {
		t.Errorf("reasons %q, want empty, too large, already started", why)
	}
}
