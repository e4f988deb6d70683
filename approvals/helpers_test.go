package approvals_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
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
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
)

// t0 is the fake clock's start: 2026-11-29 10:00 UTC.
var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const (
	owner     = "slack:UOWNER"
	owner2    = "feishu:ou_owner"
	approver  = "slack:UAPPROVER"
	approver2 = "feishu:ou_approver"
	member    = "slack:UBOB"
	stranger  = "slack:UMALLORY"
)

// env is the real core on a real bolt file, with a fake clock: requests,
// threads (effects stay in the outbox to be inspected), approvals, the
// sweeper and the router.
type env struct {
	t      *testing.T
	ctx    context.Context
	db     *bolt.DB
	clk    *clock.Fake
	svc    *requests.Service
	appr   *approvals.Service
	sweep  *ttl.Sweeper
	router *rooms.Router
}

func testRooms() []config.Room {
	return []config.Room{
		{Name: "backend", SlackChannel: "C1", FeishuChat: "oc_1", Agents: []string{"coder"},
			Approvers: []string{approver, approver2}},
		{Name: "quick", SlackChannel: "C2", Agents: []string{"coder"}, ApprovalTTL: 90 * time.Minute},
		{Name: "guarded", SlackChannel: "C3", Agents: []string{"coder", "reviewer"}, Members: []string{member},
			Approvers: []string{approver}},
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	clk := clock.NewFake(t0)
	rs := testRooms()
	svc := requests.NewService(db, clk, "acme", []string{owner, owner2})
	roomDir := directory.New(rs, []string{owner, owner2}, chat.Slack, chat.Feishu)
	th := threads.New(roomDir)
	svc.Observe(th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, TTL: 24 * time.Hour, Threads: th})
	svc.Observe(appr.Observe)
	sw, err := ttl.New(ttl.Options{Clock: clk}, appr)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: context.Background(), db: db, clk: clk, svc: svc, appr: appr, sweep: sw,
		router: rooms.New(svc, appr, roomDir, nil, slog.New(slog.DiscardHandler))}
}

// ask makes a request by user in room (pending unless user is an owner).
func (e *env) ask(user, room, text string) *requests.Request {
	e.t.Helper()
	surface, _, _ := cut(user)
	r, err := e.svc.Create(e.ctx, requests.Ask{Agent: "coder", Room: room, Surface: surface, User: user, Text: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func cut(user string) (string, string, bool) {
	for i := range user {
		if user[i] == ':' {
			return user[:i], user[i+1:], true
		}
	}
	return user, "", false
}

func (e *env) approval(id string) *approvals.Approval {
	e.t.Helper()
	a, err := e.appr.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *env) request(id requests.ID) *requests.Request {
	e.t.Helper()
	r, err := e.svc.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// effects returns the undelivered outbox effects.
func (e *env) effects() []threads.Effect {
	e.t.Helper()
	var out []threads.Effect
	err := e.db.View(e.ctx, func(tx store.Tx) error {
		pending, err := store.PendingEffects(tx, 0)
		for _, p := range pending {
			var ef threads.Effect
			if err := json.Unmarshal(p.Payload, &ef); err != nil {
				return err
			}
			out = append(out, ef)
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// cardEffects returns the outbox effects of op that post or update a copy
// of approval id's card.
func (e *env) cardEffects(id string, op threads.Op) []threads.Effect {
	var out []threads.Effect
	for _, ef := range e.effects() {
		name := ef.Save
		if op == threads.OpUpdate {
			name = ef.Ref
		}
		if ef.Op == op && ef.Message.Kind == "approval" && hasPrefix(name, "approval/"+id+"/") {
			out = append(out, ef)
		}
	}
	return out
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// auditOf returns the audit records of request id.
func (e *env) auditOf(id requests.ID) []audit.Record {
	e.t.Helper()
	recs, err := audit.List(e.ctx, e.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// allAudit returns every audit record.
func (e *env) allAudit() []audit.Record {
	e.t.Helper()
	recs, err := audit.List(e.ctx, e.db, audit.Query{}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func count(recs []audit.Record, actions ...string) int {
	n := 0
	for _, r := range recs {
		for _, a := range actions {
			if r.Action == a {
				n++
			}
		}
	}
	return n
}

// sweepOnce runs one sweep and fails the test on error.
func (e *env) sweepOnce() ttl.Result {
	e.t.Helper()
	res, err := e.sweep.SweepOnce(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// waitFor polls cond with a short tick until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
