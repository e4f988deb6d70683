package rooms_test

import (
	"context"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
)

// TestAskTooLarge: an ask in chat over limits.request_bytes is refused with
// a reply that names the limit and its key, audited as ask_refused, and
// makes no request.
func TestAskTooLarge(t *testing.T) {
	ctx := context.Background()
	f := newRoomFixture(t)
	db, svc, rt := f.db, f.svc, f.rt
	svc.SetMaxBytes(1 << 10)

	resp := rt.Handle(ctx, chat.Event{Kind: chat.Ask, Surface: chat.Console, ID: "ev1", Channel: "main", User: alice,
		Text: "@coder " + strings.Repeat("a", 2<<10)})
	if !resp.Error || !strings.Contains(resp.Text, "over the limit of 1024 bytes") || !strings.Contains(resp.Text, requests.LimitKey) {
		t.Fatalf("answer %+v; want a refusal naming the limit and %s", resp, requests.LimitKey)
	}
	if rs, err := svc.List(ctx, requests.Filter{}); err != nil || len(rs) != 0 {
		t.Errorf("requests after the refusal: %d (%v), want none", len(rs), err)
	}
	recs, err := audit.List(ctx, db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Action != "ask_refused" || !strings.Contains(recs[0].Detail, requests.LimitKey) {
		t.Errorf("audit %+v; want one ask_refused naming %s", recs, requests.LimitKey)
	}
}
