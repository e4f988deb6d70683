package requests_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

func TestAuditOnePerChange(t *testing.T) {
	f := newFixture(t)
	r := f.create(t, ask("build it"))
	steps := []requests.Event{requests.Approve, requests.Start, requests.Resume, requests.Finish}
	for _, e := range steps {
		f.clk.Advance(time.Second)
		f.apply(t, r.ID, e)
		// A refused event in between adds nothing.
		if _, err := f.svc.Apply(context.Background(), r.ID, requests.Change{Event: requests.Expire, Actor: "t"}); err == nil {
			t.Fatal("expire accepted")
		}
	}
	recs := auditOf(t, f.db, r.ID)
	var got []string
	for _, rec := range recs {
		got = append(got, rec.Action+":"+rec.From+">"+rec.To)
	}
	want := []string{"create:>pending", "approve:pending>approved", "start:approved>running", "resume:running>running", "finish:running>done"}
	if !slices.Equal(got, want) {
		t.Errorf("audit trail %v\nwant %v", got, want)
	}
	for i, rec := range recs {
		if rec.RequestID != r.ID.String() || !rec.Time.Equal(day0.Add(time.Duration(i)*time.Second)) {
			t.Errorf("record %d: %+v", i, rec)
		}
	}
	// Another request's records stay apart.
	r2 := f.create(t, ask("other"))
	if n := len(auditOf(t, f.db, r2.ID)); n != 1 {
		t.Errorf("second request: %d records", n)
	}
	if c, _ := audit.Count(context.Background(), f.db); c != 6 {
		t.Errorf("audit count %d, want 6", c)
	}
}

func TestApplyMutate(t *testing.T) {
	f := newFixture(t)
	r := f.createIn(t, requests.Running, "x")
	got, err := f.svc.Apply(context.Background(), r.ID, requests.Change{Event: requests.Finish, Actor: "agent",
		Mutate: func(r *requests.Request) { r.Result = "42" }})
	if err != nil || got.Result != "42" || got.State != requests.Done {
		t.Fatalf("finish with result: %+v, %v", got, err)
	}
	if s, _ := f.svc.Get(context.Background(), r.ID); s.Result != "42" {
		t.Errorf("result not stored: %+v", s)
	}
	// Mutate edits the record, not the transition: the state, ID and owner
	// stay what the event says, in the record and in the indexes.
	r2 := f.create(t, ask("y"))
	got, err = f.svc.Apply(context.Background(), r2.ID, requests.Change{Event: requests.Approve, Actor: "t",
		Mutate: func(r *requests.Request) { r.State = requests.Done; r.Version = 99 }})
	if err != nil || got.State != requests.Approved || got.Version != 2 {
		t.Fatalf("mutate that edits the state: %+v, %v", got, err)
	}
	if done, _ := f.svc.List(context.Background(), requests.Filter{State: requests.Done}); len(done) != 1 {
		t.Errorf("done list: %v", ids(done))
	}
	if recs := auditOf(t, f.db, r2.ID); recs[len(recs)-1].To != "approved" {
		t.Errorf("audit %+v", recs[len(recs)-1])
	}
}

func TestUpdateTx(t *testing.T) {
	f := newFixture(t)
	r := f.createIn(t, requests.Running, "x")
	err := f.db.Update(context.Background(), func(tx store.Tx) error {
		_, err := f.svc.UpdateTx(tx, r.ID, ownerUser, "cancel_requested", "stop please", func(r *requests.Request) {
			r.CancelRequested = true
			r.State = requests.Cancelled // ignored: no state change here
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.svc.Get(context.Background(), r.ID)
	if !got.CancelRequested || got.State != requests.Running || got.Version != r.Version+1 {
		t.Errorf("after UpdateTx: %+v", got)
	}
	recs := auditOf(t, f.db, r.ID)
	if last := recs[len(recs)-1]; last.Action != "cancel_requested" || last.From != "running" || last.To != "running" || last.Detail != "stop please" {
		t.Errorf("audit %+v", last)
	}
	// Without an action, no audit record.
	n := len(recs)
	_ = f.db.Update(context.Background(), func(tx store.Tx) error {
		_, err := f.svc.UpdateTx(tx, r.ID, "agent", "", "", func(r *requests.Request) { r.Progress = 50 })
		return err
	})
	if len(auditOf(t, f.db, r.ID)) != n {
		t.Error("UpdateTx without an action wrote an audit record")
	}
	if running, _ := f.svc.List(context.Background(), requests.Filter{State: requests.Running}); len(running) != 1 || running[0].Progress != 50 {
		t.Errorf("running list after UpdateTx: %+v", running)
	}
}

func TestRetry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, s := range []requests.State{requests.Pending, requests.Approved, requests.Running} {
		r := f.createIn(t, s, "not yet")
		before := dump(t, f.db)
		if got, err := f.svc.Retry(ctx, r.ID, ownerUser, "console"); err == nil || !strings.Contains(err.Error(), s.String()) {
			t.Errorf("retry of %s: %+v, %v; want a refusal naming the state", s, got, err)
		}
		if dump(t, f.db) != before {
			t.Errorf("refused retry of %s changed the store", s)
		}
	}
	if _, err := f.svc.Retry(ctx, requests.NewID(day0, 77), ownerUser, "console"); !errors.Is(err, requests.ErrUnknown) {
		t.Errorf("retry of an unknown ID: %v", err)
	}
	for s := range terminal {
		old := f.createIn(t, s, "try "+s.String())
		r, err := f.svc.Retry(ctx, old.ID, member, "console")
		if err != nil {
			t.Fatalf("retry of %s: %v", s, err)
		}
		if r.ID == old.ID || r.RetryOf != old.ID || r.Ask != old.Ask || r.Agent != old.Agent || r.Room != old.Room ||
			r.State != requests.Pending || r.Requester != member || r.Surface != "console" {
			t.Errorf("retry of %s: %+v", s, r)
		}
		// Both stay in history.
		if o, _ := f.svc.Get(ctx, old.ID); o.State != s {
			t.Errorf("original of the retry: %+v", o)
		}
		recs := auditOf(t, f.db, r.ID)
		if len(recs) != 1 || !strings.HasPrefix(recs[0].Detail, "retry of "+old.ID.String()) {
			t.Errorf("audit of the retry: %+v", recs)
		}
	}
	// An owner's retry is approved at once.
	old := f.createIn(t, requests.Failed, "z")
	if r, err := f.svc.Retry(ctx, old.ID, ownerUser, "slack"); err != nil || r.State != requests.Approved {
		t.Errorf("owner's retry: %+v, %v", r, err)
	}
}

// TestRetryKeepsReferences: an ask that mentions R-01 on its day still means
// that day's R-01 when it is retried days later.
func TestRetryKeepsReferences(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first := f.create(t, ask("first"))
	r := f.create(t, ask("continue R-01"))
	if !slices.Equal(r.References, []requests.ID{first.ID}) {
		t.Fatalf("references %v", r.References)
	}
	f.apply(t, r.ID, requests.Cancel)
	f.clk.Advance(48 * time.Hour)
	retry, err := f.svc.Retry(ctx, r.ID, member, "slack")
	if err != nil {
		t.Fatalf("retry two days later: %v", err)
	}
	if !slices.Equal(retry.References, []requests.ID{first.ID}) {
		t.Errorf("retry references %v, want [%s]", retry.References, first.ID)
	}
	// Even when that day's R-01 exists, it is not the one meant.
	today1 := f.create(t, ask("today's first"))
	if today1.ID.Seq() != 2 { // the retry was 01
		t.Fatalf("today: %s", today1.ID)
	}
	retry2, err := f.svc.Retry(ctx, r.ID, member, "slack")
	if err != nil || !slices.Equal(retry2.References, []requests.ID{first.ID}) {
		t.Errorf("second retry: %v, %v", retry2, err)
	}
}

func TestReferences(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.create(t, ask("a"))
	f.clk.Advance(24 * time.Hour)
	b := f.create(t, ask("b")) // R20261130-01
	r := f.create(t, ask(fmt.Sprintf("compare %s with R-01 and again %s, %s", a.ID, b.ID, a.ID)))
	if !slices.Equal(r.References, []requests.ID{a.ID, b.ID}) {
		t.Errorf("references %v, want [%s %s]", r.References, a.ID, b.ID)
	}
	if got, _ := f.svc.Get(ctx, r.ID); !slices.Equal(got.References, r.References) {
		t.Errorf("stored references %v", got.References)
	}
	before := dump(t, f.db)
	for _, text := range []string{"what about R-09?", "and R20261129-02", "R20261129-01 then R-42"} {
		_, err := f.svc.Create(ctx, ask(text))
		if !errors.Is(err, requests.ErrUnknown) {
			t.Errorf("ask %q: %v; want ErrUnknown", text, err)
		}
	}
	if dump(t, f.db) != before {
		t.Error("a refused ask changed the store (number, audit or dedupe key)")
	}
	// Another owner's request is not a known reference.
	other := requests.NewService(f.db, f.clk, "globex", nil)
	if _, err := other.Create(ctx, ask("see "+a.ID.String())); !errors.Is(err, requests.ErrUnknown) {
		t.Errorf("cross-owner mention: %v", err)
	}
}

func TestGetUnknown(t *testing.T) {
	f := newFixture(t)
	for _, id := range []requests.ID{requests.NewID(day0, 1), {}} {
		if r, err := f.svc.Get(context.Background(), id); !errors.Is(err, requests.ErrUnknown) || r != nil {
			t.Errorf("Get(%v) = %v, %v; want ErrUnknown", id, r, err)
		}
		if _, err := f.svc.Apply(context.Background(), id, requests.Change{Event: requests.Approve}); !errors.Is(err, requests.ErrUnknown) {
			t.Errorf("Apply(%v) = %v; want ErrUnknown", id, err)
		}
	}
	r := f.create(t, ask("x"))
	if _, err := f.svc.Get(context.Background(), requests.NewID(day0.AddDate(0, 0, 1), r.ID.Seq())); !errors.Is(err, requests.ErrUnknown) {
		t.Errorf("same counter, other day: %v", err)
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// 101 requests: order must be numeric (…-99 before …-100).
	var all []string
	for i := range 101 {
		a := ask(fmt.Sprintf("%d", i))
		if i%2 == 1 {
			a.Agent = "reviewer"
		}
		all = append(all, f.create(t, a).ID.String())
	}
	f.apply(t, mustID(t, "R20261129-01"), requests.Approve)
	f.apply(t, mustID(t, "R20261129-02"), requests.Approve)
	f.apply(t, mustID(t, "R20261129-03"), requests.Approve)
	f.apply(t, mustID(t, "R20261129-03"), requests.Start)
	f.apply(t, mustID(t, "R20261129-100"), requests.Deny)
	f.clk.Advance(24 * time.Hour)
	next := f.create(t, ask("tomorrow")) // pending, coder
	all = append(all, next.ID.String())

	check := func(flt requests.Filter, want []string) {
		t.Helper()
		got, err := f.svc.List(ctx, flt)
		if err != nil || !slices.Equal(ids(got), want) {
			t.Errorf("List(%+v) = %v, %v\nwant %v", flt, ids(got), err, want)
		}
	}
	check(requests.Filter{}, all)
	check(requests.Filter{Limit: 3}, all[:3])
	check(requests.Filter{State: requests.Approved}, []string{"R20261129-01", "R20261129-02"})
	check(requests.Filter{State: requests.Approved, Agent: "coder"}, []string{"R20261129-01"})
	check(requests.Filter{State: requests.Approved, Agent: "reviewer"}, []string{"R20261129-02"})
	check(requests.Filter{State: requests.Running}, []string{"R20261129-03"})
	check(requests.Filter{State: requests.Cancelled}, []string{"R20261129-100"})
	check(requests.Filter{State: requests.Done}, nil)
	check(requests.Filter{Agent: "nobody"}, nil)
	var pendingCoder []string
	for i, id := range all[:101] {
		if i%2 == 0 && i != 0 && i != 2 && i != 99 {
			pendingCoder = append(pendingCoder, id)
		}
	}
	pendingCoder = append(pendingCoder, next.ID.String())
	check(requests.Filter{State: requests.Pending, Agent: "coder"}, pendingCoder)
	if p, _ := f.svc.List(ctx, requests.Filter{State: requests.Pending}); len(p) != 102-4 {
		t.Errorf("pending: %d", len(p))
	}
	// The queue and running indexes follow the state.
	err := f.db.View(ctx, func(tx store.Tx) error {
		q, err := f.svc.QueueTx(tx, "coder", 0)
		if err != nil || !slices.Equal(ids(q), []string{"R20261129-01"}) {
			t.Errorf("coder queue %v, %v", ids(q), err)
		}
		n, err := f.svc.NextTx(tx, "coder")
		if err != nil || n == nil || n.ID.String() != "R20261129-03" {
			t.Errorf("coder next: %v, %v (the running one first)", n, err)
		}
		n, err = f.svc.NextTx(tx, "reviewer")
		if err != nil || n == nil || n.ID.String() != "R20261129-02" {
			t.Errorf("reviewer next: %v, %v", n, err)
		}
		n, err = f.svc.NextTx(tx, "nobody")
		if err != nil || n != nil {
			t.Errorf("nobody's next: %v, %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpdateTxReassign: moving a queued request to another agent moves it
// between the agents' queues.
func TestUpdateTxReassign(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := f.createIn(t, requests.Approved, "x")
	err := f.db.Update(ctx, func(tx store.Tx) error {
		_, err := f.svc.UpdateTx(tx, r.ID, ownerUser, "reassign", "to reviewer", func(r *requests.Request) { r.Agent = "reviewer" })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = f.db.View(ctx, func(tx store.Tx) error {
		c, _ := f.svc.QueueTx(tx, "coder", 0)
		rv, _ := f.svc.QueueTx(tx, "reviewer", 0)
		if len(c) != 0 || !slices.Equal(ids(rv), []string{r.ID.String()}) {
			t.Errorf("queues after reassign: coder %v, reviewer %v", ids(c), ids(rv))
		}
		return nil
	})
}

// TestAuditDetailTrimmed: a long ask is cut in the audit record at a
// character boundary, never inside a multi-byte character.
func TestAuditDetailTrimmed(t *testing.T) {
	f := newFixture(t)
	for pad := 195; pad <= 200; pad++ {
		text := strings.Repeat("a", pad) + strings.Repeat("é✓😀", 20)
		r := f.create(t, ask(text))
		d := auditOf(t, f.db, r.ID)[0].Detail
		if !utf8.ValidString(d) || strings.ContainsRune(d, utf8.RuneError) {
			t.Errorf("pad %d: detail %q is not clean UTF-8", pad, d)
		}
		if !strings.HasSuffix(d, "…") || !strings.HasPrefix(text, strings.TrimSuffix(d, "…")) || len(d) > 200+len("…") {
			t.Errorf("pad %d: detail %q is not a prefix of the ask", pad, d)
		}
	}
	short := f.create(t, ask("short é"))
	if d := auditOf(t, f.db, short.ID)[0].Detail; d != "short é" {
		t.Errorf("short ask: detail %q", d)
	}
}
