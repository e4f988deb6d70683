package approvals_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/core/coretest"
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
	th     *threads.Threads
}

// testConfig has three rooms: backend on Slack and Feishu with approvers
// on both, quick with a shorter approval TTL, guarded with members.
const testConfig = `
owner: acme
owners: [slack:UOWNER, feishu:ou_owner]
data_dir: %DIR%
slack: {mode: socket, bot_token: xoxb-test, app_token: xapp-test}
feishu: {mode: ws, app_id: cli_test, app_secret: test}
approvals: {ttl: 24h}
rooms:
  - {name: backend, slack_channel: C1, feishu_chat: oc_1, agents: [coder], approvers: [slack:UAPPROVER, feishu:ou_approver]}
  - {name: quick, slack_channel: C2, agents: [coder], approval_ttl: 90m}
  - {name: guarded, slack_channel: C3, agents: [coder, reviewer], members: [slack:UBOB], approvers: [slack:UAPPROVER]}
agents:
  coder: {kind: exec, command: [demo]}
  reviewer: {kind: exec, command: [demo]}
`

// newEnv assembles the whole bridge (core.New) without running it: no
// agent runs, nothing sweeps but the tests, effects stay in the outbox.
func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	b := coretest.Start(t, coretest.Options{Config: testConfig, Dir: t.TempDir(), Clock: clk,
		Surfaces: []string{chat.Slack, chat.Feishu}, Idle: true})
	return &env{t: t, ctx: context.Background(), db: b.DB, clk: clk, svc: b.Requests(), appr: b.Approvals(),
		sweep: b.Sweeper(), router: b.Router(), th: b.Threads()}
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

// effects returns the undelivered outbox effects, those an OpExpand effect
// stands for expanded first (as the outbox does when it delivers them).
func (e *env) effects() []threads.Effect {
	e.t.Helper()
	var out []threads.Effect
	err := e.db.Update(e.ctx, func(tx store.Tx) error {
		pending, err := store.PendingEffects(tx, 0)
		for _, p := range pending {
			var ef threads.Effect
			if err == nil && json.Unmarshal(p.Payload, &ef) == nil && ef.Op == threads.OpExpand {
				err = e.th.ExpandTx(tx, p)
			}
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	err = e.db.View(e.ctx, func(tx store.Tx) error {
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

// pendingRaw returns the outbox as stored (nothing expanded).
func (e *env) pendingRaw() []store.Effect {
	e.t.Helper()
	var out []store.Effect
	if err := e.db.View(e.ctx, func(tx store.Tx) error {
		var err error
		out, err = store.PendingEffects(tx, 0)
		return err
	}); err != nil {
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
