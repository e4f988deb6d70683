package rooms_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// TestAskTooLarge: an ask in chat over limits.request_bytes is refused with
// a reply that names the limit and its key, audited as ask_refused, and
// makes no request.
func TestAskTooLarge(t *testing.T) {
	ctx := context.Background()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	log := slog.New(slog.DiscardHandler)
	roomDir := directory.New([]config.Room{{Name: "main", Console: true, Agents: []string{"coder"}}}, []string{alice}, chat.Console)
	svc := requests.NewService(db, clk, "acme", []string{alice})
	svc.SetMaxBytes(1 << 10)
	th := threads.New(roomDir)
	svc.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, Threads: th, Log: log})
	svc.AddObserver("approvals", appr.Observe)
	rt := rooms.New(svc, appr, roomDir, nil, log)

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
