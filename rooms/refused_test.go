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
)

// TestWebhookRefusalsAuditedBounded: webhooks a connector refused reach the
// audit log as webhook_refused, at most RefusalsPerWindow per surface and
// reason per window; the next record after a window that suppressed some
// says how many; nothing else changes.
func TestWebhookRefusalsAuditedBounded(t *testing.T) {
	ctx := context.Background()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	log := slog.New(slog.DiscardHandler)
	rs := []config.Room{{Name: "main", Console: true, Agents: []string{"coder"}}}
	svc := requests.NewService(db, clk, "acme", []string{"console:alice"})
	roomDir := directory.New(rs, []string{"console:alice"})
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, Log: log})
	rt := rooms.New(svc, appr, roomDir, nil, log)
	var inbound []chat.EventKind
	rt.OnInbound = func(_ string, k chat.EventKind, _ bool) { inbound = append(inbound, k) }

	forged := chat.RefusedEvent(chat.Slack, 401, "signature check failed")
	big := chat.RefusedEvent(chat.Slack, 413, "body over 1 MiB")
	lark := chat.RefusedEvent(chat.Feishu, 401, "signature check failed")
	for range 3 * rooms.RefusalsPerWindow {
		if resp := rt.Handle(ctx, forged); resp.Text != "" || resp.Error {
			t.Fatalf("a refusal answered %+v: the connector has answered the sender", resp)
		}
	}
	rt.Handle(ctx, big)
	rt.Handle(ctx, lark)
	clk.Advance(rooms.RefusalWindow)
	rt.Handle(ctx, forged)

	recs, err := audit.List(ctx, db, audit.Query{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Action != "webhook_refused" || r.RequestID != "" {
			t.Fatalf("unexpected audit record %+v", r)
		}
		got = append(got, r.Surface+" "+r.Actor+" "+r.Detail)
	}
	want := []string{}
	for range rooms.RefusalsPerWindow {
		want = append(want, "slack slack:unverified HTTP 401: signature check failed")
	}
	want = append(want, "slack slack:unverified HTTP 413: body over 1 MiB",
		"feishu feishu:unverified HTTP 401: signature check failed",
		"slack slack:unverified HTTP 401: signature check failed (and 10 more like it not recorded; see the log)")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(inbound) != 3*rooms.RefusalsPerWindow+3 || inbound[0] != chat.Refused {
		t.Errorf("OnInbound saw %d events (%v), want every refusal", len(inbound), inbound[:1])
	}
	if rs, err := svc.List(ctx, requests.Filter{}); err != nil || len(rs) != 0 {
		t.Errorf("requests after refusals: %d, %v; want none", len(rs), err)
	}
}
