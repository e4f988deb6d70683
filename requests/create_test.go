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
