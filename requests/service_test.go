package requests_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

func TestCreateApprovedForOwners(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		user     string
		approved bool
		want     requests.State
	}{
		{ownerUser, false, requests.Approved},
		{member, false, requests.Pending},
		{"feishu:ou_other", false, requests.Pending},
		{member, true, requests.Approved}, // delegated ask of an approved root
	} {
		a := ask("hello")
		a.User, a.Approved = tc.user, tc.approved
		r := f.create(t, a)
		if r.State != tc.want || r.Version != 1 || r.Owner != owner || r.Requester != tc.user ||
			r.Agent != "coder" || r.Room != "backend" || r.Surface != "slack" || r.Ask != "hello" ||
			!r.Created.Equal(day0) || !r.Updated.Equal(day0) || !r.StartedAt.IsZero() || !r.EndedAt.IsZero() {
			t.Errorf("create by %s (approved=%v): %+v; want state %s", tc.user, tc.approved, r, tc.want)
		}
		if !f.svc.IsOwner(ownerUser) || f.svc.IsOwner(member) {
			t.Error("IsOwner wrong")
		}
		recs := auditOf(t, f.db, r.ID)
		if len(recs) != 1 || recs[0].Action != "create" || recs[0].To != tc.want.String() || recs[0].From != "" ||
			recs[0].Actor != tc.user || recs[0].Surface != "slack" || recs[0].Detail != "hello" {
			t.Errorf("audit of create: %+v", recs)
		}
		stored, err := f.svc.Get(context.Background(), r.ID)
		if err != nil || stored.State != r.State || stored.ID != r.ID {
			t.Errorf("Get after create: %+v, %v", stored, err)
		}
	}
}

func TestCreateValidates(t *testing.T) {
	f := newFixture(t)
	for _, a := range []requests.Ask{
		{Surface: "slack", User: member, Text: "no agent"},
		{Agent: "coder", Surface: "slack", Text: "no user"},
		{Agent: "coder", User: member, Text: "no surface"},
	} {
		if _, err := f.svc.Create(context.Background(), a); err == nil {
			t.Errorf("Create(%+v) accepted", a)
		}
	}
	if got := f.create(t, ask("x")).ID.String(); got != "R20261129-01" {
		t.Errorf("a refused create used a number: next is %s", got)
	}
}

// TestCreateConcurrent: 1,000 concurrent creates on one day get 1,000
// distinct, consecutive IDs.
func TestCreateConcurrent(t *testing.T) {
	f := newFixture(t)
	const n = 1000
	got := make([]requests.ID, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := f.svc.Create(context.Background(), ask(fmt.Sprintf("ask %d", i)))
			if err != nil {
				errs <- err
				return
			}
			got[i] = r.ID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sortIDs(got)
	for i, id := range got {
		if want := requests.NewID(day0, i+1); id != want {
			t.Fatalf("ID %d = %s, want %s", i, id, want)
		}
	}
	if got[n-1].String() != "R20261129-1000" {
		t.Errorf("last = %s", got[n-1])
	}
	all, err := f.svc.List(context.Background(), requests.Filter{})
	if err != nil || len(all) != n {
		t.Fatalf("List: %d, %v", len(all), err)
	}
	for i, r := range all {
		if r.ID != got[i] || r.Ask == "" {
			t.Fatalf("List[%d] = %s, want %s (ID order)", i, r.ID, got[i])
		}
	}
	if c, err := audit.Count(context.Background(), f.db); err != nil || c != n {
		t.Errorf("audit count %d, %v; want %d", c, err, n)
	}
}

// TestCreateConcurrentWithFailures: creates refused inside a shared commit
// (here by an observer) do not burn numbers or disturb the others.
func TestCreateConcurrentWithFailures(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("boom")
	f.svc.AddObserver("test", func(_ store.Tx, before, after *requests.Request) error {
		if before == nil && strings.HasPrefix(after.Ask, "fail") {
			return boom
		}
		return nil
	})
	const n = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok []requests.ID
	for i := range n {
		wg.Go(func() {
			text := "ok"
			if i%3 == 0 {
				text = "fail"
			}
			r, err := f.svc.Create(context.Background(), ask(text))
			switch {
			case text == "fail" && !errors.Is(err, boom):
				t.Errorf("failing create: %v", err)
			case text == "ok" && err != nil:
				t.Errorf("create: %v", err)
			case err == nil:
				mu.Lock()
				ok = append(ok, r.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sortIDs(ok)
	if len(ok) != 200 {
		t.Fatalf("%d created, want 200", len(ok))
	}
	for i, id := range ok {
		if id.Seq() != i+1 {
			t.Fatalf("IDs not consecutive: %d-th is %s", i, id)
		}
	}
	if c, _ := audit.Count(context.Background(), f.db); c != 200 {
		t.Errorf("audit count %d, want 200", c)
	}
}

func TestCounterPerDay(t *testing.T) {
	f := newFixture(t)
	f.clk.Set(time.Date(2026, 11, 29, 23, 59, 59, 999_000_000, time.UTC))
	for i := 1; i <= 3; i++ {
		if got := f.create(t, ask("x")).ID.String(); got != fmt.Sprintf("R20261129-%02d", i) {
			t.Fatalf("create %d: %s", i, got)
		}
	}
	f.clk.Advance(time.Millisecond) // midnight UTC
	if got := f.create(t, ask("x")).ID.String(); got != "R20261130-01" {
		t.Errorf("first of the next day: %s, want R20261130-01", got)
	}
	// A clock in another zone: 07:00 in UTC+8 on Dec 1 is still Nov 30 UTC.
	f.clk.Set(time.Date(2026, 12, 1, 7, 0, 0, 0, time.FixedZone("UTC+8", 8*3600)))
	if got := f.create(t, ask("x")).ID.String(); got != "R20261130-02" {
		t.Errorf("UTC+8 morning: %s, want R20261130-02", got)
	}
	// Both days' requests are kept and listed in ID order.
	all, _ := f.svc.List(context.Background(), requests.Filter{})
	want := []string{"R20261129-01", "R20261129-02", "R20261129-03", "R20261130-01", "R20261130-02"}
	if !slices.Equal(ids(all), want) {
		t.Errorf("List = %v, want %v", ids(all), want)
	}
}

func TestCounterSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	f.create(t, ask("a"))
	f.create(t, ask("b"))
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Create(context.Background(), ask("closed")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("create on a closed store: %v", err)
	}
	db := openDB(t, f.path)
	svc := requests.NewService(db, f.clk, owner, []string{ownerUser})
	r, err := svc.Create(context.Background(), ask("c"))
	if err != nil || r.ID.String() != "R20261129-03" {
		t.Fatalf("after restart: %v, %v; want R20261129-03", r, err)
	}
	old, err := svc.Get(context.Background(), requests.NewID(day0, 1))
	if err != nil || old.Ask != "a" {
		t.Errorf("first request after restart: %+v, %v", old, err)
	}
}

func TestOwnersHaveSeparateCounters(t *testing.T) {
	f := newFixture(t)
	other := requests.NewService(f.db, f.clk, "globex", nil)
	a1 := f.create(t, ask("acme 1"))
	g1, err := other.Create(context.Background(), ask("globex 1"))
	if err != nil {
		t.Fatal(err)
	}
	a2 := f.create(t, ask("acme 2"))
	g2, _ := other.Create(context.Background(), ask("globex 2"))
	if a1.ID.Seq() != 1 || a2.ID.Seq() != 2 || g1.ID.Seq() != 1 || g2.ID.Seq() != 2 {
		t.Fatalf("acme %s %s, globex %s %s", a1.ID, a2.ID, g1.ID, g2.ID)
	}
	if g1.Owner != "globex" || g1.State != requests.Pending {
		t.Errorf("globex request: %+v", g1)
	}
	// Same ID, different requests.
	ga, _ := f.svc.Get(context.Background(), a1.ID)
	gg, _ := other.Get(context.Background(), a1.ID)
	if ga.Ask != "acme 1" || gg.Ask != "globex 1" {
		t.Errorf("Get by owner: %q, %q", ga.Ask, gg.Ask)
	}
	// Lists do not mix owners.
	for svc, want := range map[*requests.Service][]string{f.svc: {"acme 1", "acme 2"}, other: {"globex 1", "globex 2"}} {
		for _, flt := range []requests.Filter{{}, {State: requests.Pending}, {Agent: "coder"}} {
			rs, _ := svc.List(context.Background(), flt)
			var asks []string
			for _, r := range rs {
				asks = append(asks, r.Ask)
			}
			if !slices.Equal(asks, want) {
				t.Errorf("List(%+v) = %v, want %v", flt, asks, want)
			}
		}
	}
	// Applying on one owner's request leaves the other's alone.
	f.apply(t, a1.ID, requests.Approve)
	if gg, _ := other.Get(context.Background(), a1.ID); gg.State != requests.Pending {
		t.Errorf("globex's %s moved with acme's", a1.ID)
	}
}

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

func TestEventKeyDedupe(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := ask("once")
	a.EventKey = "slack:Ev1"
	first := f.create(t, a)
	before := dump(t, f.db)
	if r, err := f.svc.Create(ctx, a); !errors.Is(err, requests.ErrDuplicate) || r != nil {
		t.Fatalf("second create: %v, %v; want ErrDuplicate", r, err)
	}
	if dump(t, f.db) != before {
		t.Error("a duplicate changed the store")
	}
	if all, _ := f.svc.List(ctx, requests.Filter{}); len(all) != 1 || all[0].ID != first.ID {
		t.Errorf("requests after a duplicate: %v", ids(all))
	}
	// Another key is another event.
	a.EventKey = "slack:Ev2"
	f.create(t, a)
	// A create refused for another reason does not burn its key.
	b := ask("see R-55")
	b.EventKey = "slack:Ev3"
	if _, err := f.svc.Create(ctx, b); !errors.Is(err, requests.ErrUnknown) {
		t.Fatal(err)
	}
	b.Text = "fixed"
	f.create(t, b)
	// Concurrent deliveries of one event make one request.
	c := ask("storm")
	c.EventKey = "feishu:ev-storm"
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, dups := 0, 0
	for range 50 {
		wg.Go(func() {
			_, err := f.svc.Create(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, requests.ErrDuplicate):
				dups++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created != 1 || dups != 49 {
		t.Errorf("50 deliveries: %d created, %d duplicates", created, dups)
	}
	// Event IDs are remembered for a day.
	f.clk.Advance(23 * time.Hour)
	if _, err := f.svc.Create(ctx, c); !errors.Is(err, requests.ErrDuplicate) {
		t.Errorf("23 h later: %v", err)
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

// TestObservers: observers run in the create/apply transaction; an error
// from one rolls everything back.
func TestObservers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	fail := ""
	var seen []string
	f.svc.AddObserver("test", func(tx store.Tx, before, after *requests.Request) error {
		from := "-"
		if before != nil {
			from = before.State.String()
		}
		// Writes of the observer commit with the change.
		if err := tx.Put("observed", after.ID.Key()+"/"+from+">"+after.State.String(), nil); err != nil {
			return err
		}
		// The observer sees its own transaction's audit record.
		recs := 0
		_ = tx.Scan("audit_by_request", after.ID.String()+"/", store.PrefixEnd(after.ID.String()+"/"), func(string, []byte) error {
			recs++
			return nil
		})
		seen = append(seen, fmt.Sprintf("%s %s>%s audit=%d", after.ID, from, after.State, recs))
		if fail != "" && strings.Contains(after.Ask, fail) {
			return fmt.Errorf("observer says no to %s", after.ID)
		}
		return nil
	})
	r := f.create(t, ask("fine"))
	f.apply(t, r.ID, requests.Approve)
	want := []string{"R20261129-01 ->pending audit=1", "R20261129-01 pending>approved audit=2"}
	if !slices.Equal(seen, want) {
		t.Errorf("observer saw %v\nwant %v", seen, want)
	}
	var keys []string
	_ = f.db.View(ctx, func(tx store.Tx) error {
		return tx.Scan("observed", "", "", func(k string, _ []byte) error { keys = append(keys, k); return nil })
	})
	if len(keys) != 2 {
		t.Errorf("observer writes %v", keys)
	}

	fail = "bad"
	before := dump(t, f.db)
	if _, err := f.svc.Create(ctx, ask("bad one")); err == nil || !strings.Contains(err.Error(), "observer says no") {
		t.Errorf("create with a failing observer: %v", err)
	}
	if dump(t, f.db) != before {
		t.Error("a create rolled back by an observer left traces")
	}
	r2 := f.create(t, ask("good"))
	if r2.ID.Seq() != 2 {
		t.Errorf("next ID %s: the rolled-back create used a number", r2.ID)
	}
	// Apply rolled back by the observer.
	fail = "good"
	before = dump(t, f.db)
	if _, err := f.svc.Apply(ctx, r2.ID, requests.Change{Event: requests.Approve, Actor: "t"}); err == nil {
		t.Error("apply with a failing observer succeeded")
	}
	if dump(t, f.db) != before {
		t.Error("an apply rolled back by an observer changed the store")
	}
	if got, _ := f.svc.Get(ctx, r2.ID); got.State != requests.Pending || got.Version != 1 {
		t.Errorf("after rollback: %+v", got)
	}
}

// TestNotifications: creates and changes wake the requests topic and the
// agent's topic once committed.
func TestNotifications(t *testing.T) {
	f := newFixture(t)
	reqs, stop1 := f.db.Subscribe(requests.TopicRequests)
	defer stop1()
	coder, stop2 := f.db.Subscribe(requests.TopicAgent("coder"))
	defer stop2()
	other, stop3 := f.db.Subscribe(requests.TopicAgent("reviewer"))
	defer stop3()
	r := f.create(t, ask("x"))
	for name, ch := range map[string]<-chan struct{}{"requests": reqs, "agent:coder": coder} {
		select {
		case <-ch:
		default:
			t.Errorf("no signal on %s after create", name)
		}
	}
	select {
	case <-other:
		t.Error("reviewer woken by coder's request")
	default:
	}
	f.apply(t, r.ID, requests.Approve)
	select {
	case <-coder:
	default:
		t.Error("no signal on agent:coder after approve")
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
