package requests_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/requests"
	"pgregory.net/rapid"
)

// lifecycle is docs/design.md §2 written out independently of the package's table:
// the legal (state, event) pairs and where they lead. Every pair not listed
// is illegal.
var lifecycle = map[requests.State]map[requests.Event]requests.State{
	requests.Pending: {
		requests.Approve: requests.Approved,
		requests.Deny:    requests.Cancelled,
		requests.Cancel:  requests.Cancelled,
		requests.Expire:  requests.Expired,
	},
	requests.Approved: {
		requests.Start:  requests.Running,
		requests.Cancel: requests.Cancelled,
	},
	requests.Running: {
		requests.Resume: requests.Running,
		requests.Finish: requests.Done,
		requests.Fail:   requests.Failed,
		requests.Cancel: requests.Cancelled,
	},
}

var terminal = map[requests.State]bool{
	requests.Done: true, requests.Failed: true, requests.Cancelled: true, requests.Expired: true,
}

func TestStatesAndEventsNames(t *testing.T) {
	if len(requests.States) != 7 || len(requests.Events) != 8 {
		t.Fatalf("%d states, %d events; want 7 and 8", len(requests.States), len(requests.Events))
	}
	for _, s := range requests.States {
		back, err := requests.ParseState(s.String())
		if err != nil || back != s {
			t.Errorf("ParseState(%s) = %v, %v", s, back, err)
		}
		var u requests.State
		b, _ := s.MarshalText()
		if err := u.UnmarshalText(b); err != nil || u != s {
			t.Errorf("text round trip of %s: %v, %v", s, u, err)
		}
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
	for _, bad := range []string{"", "Pending", "state(0)", "denied", "queued"} {
		if _, err := requests.ParseState(bad); err == nil {
			t.Errorf("ParseState(%q) accepted", bad)
		}
	}
	if requests.State(0).String() != "state(0)" || requests.State(9).String() != "state(9)" {
		t.Error("out-of-range states should print as state(n)")
	}
	for _, e := range requests.Events {
		if strings.HasPrefix(e.String(), "event(") || e.Target() == 0 {
			t.Errorf("event %d: name %q, target %v", e, e, e.Target())
		}
	}
	if requests.Event(0).Target() != 0 || requests.Event(42).Target() != 0 || requests.Event(42).String() != "event(42)" {
		t.Error("out-of-range events should have no target")
	}
	if requests.Deny.Target() != requests.Cancelled {
		t.Error("a deny must be recorded as cancelled")
	}
	if requests.Expire.Target() != requests.Expired {
		t.Error("an expiry must be expired, never a denial")
	}
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkNext checks one (state, event) pair of the pure function against the
// lifecycle table.
func checkNext(t fataler, s requests.State, e requests.Event) {
	t.Helper()
	got, err := requests.Next(s, e)
	want, legal := lifecycle[s][e]
	if legal {
		if err != nil || got != want {
			t.Fatalf("Next(%s, %s) = %s, %v; want %s", s, e, got, err, want)
		}
		if got != e.Target() {
			t.Fatalf("Next(%s, %s) = %s, but %s.Target() = %s", s, e, got, e, e.Target())
		}
		return
	}
	if !errors.Is(err, requests.ErrIllegalTransition) {
		t.Fatalf("Next(%s, %s) = %s, %v; want ErrIllegalTransition", s, e, got, err)
	}
	if got != s {
		t.Fatalf("Next(%s, %s) moved to %s on error", s, e, got)
	}
	msg := err.Error()
	if !strings.Contains(msg, s.String()) || !strings.Contains(msg, e.Target().String()) {
		t.Fatalf("Next(%s, %s) error %q must name both states", s, e, msg)
	}
}

func TestNextTable(t *testing.T) {
	legal := 0
	for _, s := range requests.States {
		for _, e := range requests.Events {
			t.Run(s.String()+"/"+e.String(), func(t *testing.T) { checkNext(t, s, e) })
			if _, ok := lifecycle[s][e]; ok {
				legal++
			}
		}
	}
	if legal != 10 {
		t.Errorf("%d legal pairs, want 10", legal)
	}
	// Invalid states accept nothing.
	for _, e := range requests.Events {
		if _, err := requests.Next(0, e); !errors.Is(err, requests.ErrIllegalTransition) {
			t.Errorf("Next(state(0), %s) = %v", e, err)
		}
	}
}

func TestNextProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SampledFrom(requests.States).Draw(t, "state")
		e := rapid.SampledFrom(requests.Events).Draw(t, "event")
		checkNext(t, s, e)
	})
	// Along any sequence of events, once terminal always terminal, and the
	// state only changes on legal events.
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SampledFrom([]requests.State{requests.Pending, requests.Approved}).Draw(t, "start")
		evs := rapid.SliceOfN(rapid.SampledFrom(requests.Events), 0, 40).Draw(t, "events")
		ended := false
		for _, e := range evs {
			next, err := requests.Next(s, e)
			if ended && (err == nil || next != s) {
				t.Fatalf("%s left terminal state on %s: %s, %v", s, e, next, err)
			}
			if err == nil && next != e.Target() {
				t.Fatalf("%s on %s went to %s, not its target %s", s, e, next, e.Target())
			}
			s = next
			ended = s.Terminal()
		}
	})
}

// TestApplyEveryPair drives a real request into each state and applies each
// event through the Service: legal pairs move it (with one audit record),
// illegal ones change nothing at all in the store.
func TestApplyEveryPair(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, s := range requests.States {
		for _, e := range requests.Events {
			r := f.createIn(t, s, s.String()+" "+e.String())
			before := dump(t, f.db)
			nAudit := len(auditOf(t, f.db, r.ID))
			f.clk.Advance(1500 * time.Millisecond)
			got, err := f.svc.Apply(ctx, r.ID, requests.Change{Event: e, Actor: "console:alice", Surface: "console", Detail: "because"})
			want, legal := lifecycle[s][e]
			if !legal {
				if !errors.Is(err, requests.ErrIllegalTransition) {
					t.Fatalf("%s on %s: %v; want ErrIllegalTransition", e, s, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, s.String()) || !strings.Contains(msg, e.Target().String()) || !strings.Contains(msg, r.ID.String()) {
					t.Errorf("error %q should name the ID and both states", msg)
				}
				if after := dump(t, f.db); after != before {
					t.Fatalf("refused %s on %s changed the store", e, s)
				}
				cur, err := f.svc.Get(ctx, r.ID)
				if err != nil || cur.State != s || cur.Version != r.Version {
					t.Fatalf("after refused %s: %+v, %v", e, cur, err)
				}
				continue
			}
			if err != nil || got.State != want || got.Version != r.Version+1 {
				t.Fatalf("%s on %s: %+v, %v; want %s at version %d", e, s, got, err, want, r.Version+1)
			}
			stored, err := f.svc.Get(ctx, r.ID)
			if err != nil || stored.State != want || stored.Version != got.Version || !stored.Updated.Equal(f.clk.Now()) {
				t.Fatalf("stored after %s on %s: %+v, %v", e, s, stored, err)
			}
			if e == requests.Start && !stored.StartedAt.Equal(f.clk.Now()) {
				t.Errorf("start did not set StartedAt: %v", stored.StartedAt)
			}
			if want.Terminal() != !stored.EndedAt.IsZero() {
				t.Errorf("%s: EndedAt = %v", want, stored.EndedAt)
			}
			recs := auditOf(t, f.db, r.ID)
			if len(recs) != nAudit+1 {
				t.Fatalf("%s on %s: %d audit records, want %d", e, s, len(recs), nAudit+1)
			}
			last := recs[len(recs)-1]
			if last.Action != e.String() || last.From != s.String() || last.To != want.String() ||
				last.Actor != "console:alice" || last.Surface != "console" || last.Detail != "because" || !last.Time.Equal(f.clk.Now()) {
				t.Errorf("audit record of %s on %s: %+v", e, s, last)
			}
		}
	}
}

// TestTerminalStaysTerminal applies every event to every terminal request.
func TestTerminalStaysTerminal(t *testing.T) {
	f := newFixture(t)
	for s := range terminal {
		r := f.createIn(t, s, "x")
		for _, e := range requests.Events {
			if _, err := f.svc.Apply(context.Background(), r.ID, requests.Change{Event: e, Actor: "t"}); !errors.Is(err, requests.ErrIllegalTransition) {
				t.Errorf("%s on terminal %s: %v", e, s, err)
			}
		}
		if got, _ := f.svc.Get(context.Background(), r.ID); got.State != s || got.Version != r.Version {
			t.Errorf("terminal %s moved: %+v", s, got)
		}
	}
}
