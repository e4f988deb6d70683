package requests_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"pgregory.net/rapid"
)

// mreq is the model of one request.
type mreq struct {
	id      requests.ID
	agent   string
	state   requests.State
	version int64
	audits  int
	started bool
	retryOf requests.ID
	refs    []requests.ID
}

// machine drives a Service on a real bolt file with random creates, events,
// retries, clock jumps and restarts, and compares the store with a model.
type machine struct {
	path   string
	db     *bolt.DB
	clk    *clock.Fake
	svc    *requests.Service
	reqs   []*mreq
	counts map[string]int // UTC day → last counter issued
}

var agents = []string{"coder", "reviewer"}

func (m *machine) open(t *rapid.T) {
	db, err := bolt.Open(m.path)
	if err != nil {
		t.Fatal(err)
	}
	m.db = db
	m.svc = requests.NewService(db, m.clk, owner, []string{ownerUser})
}

func (m *machine) pick(t *rapid.T) *mreq {
	if len(m.reqs) == 0 {
		t.Skip("no request yet")
	}
	return rapid.SampledFrom(m.reqs).Draw(t, "request")
}

func (m *machine) expectNew(retryOf requests.ID, state requests.State, agent string, refs []requests.ID) *mreq {
	day := m.clk.Now().UTC().Format("20060102")
	m.counts[day]++
	r := &mreq{id: requests.NewID(m.clk.Now(), m.counts[day]), agent: agent, state: state, version: 1, audits: 1, retryOf: retryOf, refs: refs}
	m.reqs = append(m.reqs, r)
	return r
}

func (m *machine) checkCreated(t *rapid.T, want *mreq, got *requests.Request) {
	if got.ID != want.id || got.State != want.state || got.Version != 1 || got.Agent != want.agent ||
		got.RetryOf != want.retryOf || !slices.Equal(got.References, want.refs) || got.Owner != owner {
		t.Fatalf("created %+v; want %+v", got, want)
	}
}

func (m *machine) create(t *rapid.T) {
	user := rapid.SampledFrom([]string{ownerUser, member, "feishu:ou_x"}).Draw(t, "user")
	agent := rapid.SampledFrom(agents).Draw(t, "agent")
	approved := rapid.Bool().Draw(t, "approved")
	text := "please do it"
	var refs []requests.ID
	if len(m.reqs) > 0 && rapid.Bool().Draw(t, "mention") {
		ref := m.pick(t).id
		refs = []requests.ID{ref}
		text += " like " + ref.String()
		if ref.Day().Equal(requests.NewID(m.clk.Now(), 1).Day()) {
			text += " (" + ref.Short() + ")" // the same request again, short
		}
	}
	got, err := m.svc.Create(context.Background(), requests.Ask{Agent: agent, Surface: "slack", User: user, Text: text, Approved: approved})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	state := requests.Pending
	if user == ownerUser || approved {
		state = requests.Approved
	}
	m.checkCreated(t, m.expectNew(requests.ID{}, state, agent, refs), got)
}

func (m *machine) apply(t *rapid.T) {
	r := m.pick(t)
	e := rapid.SampledFrom(requests.Events).Draw(t, "event")
	got, err := m.svc.Apply(context.Background(), r.id, requests.Change{Event: e, Actor: "system:test"})
	want, legal := lifecycle[r.state][e]
	if !legal {
		if !errors.Is(err, requests.ErrIllegalTransition) {
			t.Fatalf("%s on %s %s: %v; want ErrIllegalTransition", e, r.state, r.id, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s on %s %s: %v", e, r.state, r.id, err)
	}
	r.state, r.version, r.audits = want, r.version+1, r.audits+1
	r.started = r.started || e == requests.Start
	if got.State != want || got.Version != r.version {
		t.Fatalf("%s on %s: got %s v%d; want %s v%d", e, r.id, got.State, got.Version, want, r.version)
	}
}

func (m *machine) retry(t *rapid.T) {
	r := m.pick(t)
	before := len(m.reqs)
	got, err := m.svc.Retry(context.Background(), r.id, member, "slack")
	if !r.state.Terminal() {
		if err == nil {
			t.Fatalf("retry of %s %s succeeded: %+v", r.state, r.id, got)
		}
		return
	}
	if err != nil {
		t.Fatalf("retry of %s %s: %v", r.state, r.id, err)
	}
	m.checkCreated(t, m.expectNew(r.id, requests.Pending, r.agent, r.refs), got)
	if len(m.reqs) != before+1 {
		t.Fatal("model: retry did not add a request")
	}
}

func (m *machine) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Millisecond, time.Minute, 7 * time.Hour, 24 * time.Hour, 49 * time.Hour}).Draw(t, "advance")
	m.clk.Advance(d)
}

func (m *machine) restart(t *rapid.T) {
	if err := m.db.Close(); err != nil {
		t.Fatal(err)
	}
	m.open(t)
}

// check compares the whole store with the model: records, the by-state,
// queue and running indexes, and the audit count.
func (m *machine) check(t *rapid.T) {
	ctx := context.Background()
	var total uint64
	for _, r := range m.reqs {
		total += uint64(r.audits)
	}
	if n, err := audit.Count(ctx, m.db); err != nil || n != total {
		t.Fatalf("audit count %d, %v; model %d", n, err, total)
	}
	for _, s := range requests.States {
		var want []string
		for _, r := range m.reqs {
			if r.state == s {
				want = append(want, r.id.String())
			}
		}
		got, err := m.svc.List(ctx, requests.Filter{State: s})
		if err != nil || !slices.Equal(ids(got), want) {
			t.Fatalf("List(%s) = %v, %v; model %v", s, ids(got), err, want)
		}
	}
	err := m.db.View(ctx, func(tx store.Tx) error {
		for _, a := range agents {
			var queued, running []string
			for _, r := range m.reqs {
				if r.agent == a && r.state == requests.Approved {
					queued = append(queued, r.id.String())
				}
				if r.agent == a && r.state == requests.Running {
					running = append(running, r.id.String())
				}
			}
			q, err := m.svc.QueueTx(tx, a, 0)
			if err != nil || !slices.Equal(ids(q), queued) {
				return fmt.Errorf("queue of %s = %v, %v; model %v", a, ids(q), err, queued)
			}
			rr, err := m.svc.RunningTx(tx, a)
			if err != nil || !slices.Equal(ids(rr), running) {
				return fmt.Errorf("running of %s = %v, %v; model %v", a, ids(rr), err, running)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkAll compares each record and its audit trail (done once per run: it
// costs a read per request).
func (m *machine) checkAll(t *rapid.T) {
	ctx := context.Background()
	for _, r := range m.reqs {
		got, err := m.svc.Get(ctx, r.id)
		if err != nil || got.State != r.state || got.Version != r.version || got.Agent != r.agent || got.RetryOf != r.retryOf {
			t.Fatalf("Get(%s) = %+v, %v; model %+v", r.id, got, err, r)
		}
		if got.StartedAt.IsZero() == r.started || got.EndedAt.IsZero() == r.state.Terminal() {
			t.Fatalf("%s: started %v ended %v; model started %v state %s", r.id, got.StartedAt, got.EndedAt, r.started, r.state)
		}
		recs, err := audit.List(ctx, m.db, audit.Query{RequestID: r.id.String()}, 0)
		if err != nil || len(recs) != r.audits {
			t.Fatalf("audit of %s: %d records, %v; model %d", r.id, len(recs), err, r.audits)
		}
		if recs[0].Action != "create" {
			t.Fatalf("first audit record of %s is %q", r.id, recs[0].Action)
		}
		for i := 1; i < len(recs); i++ {
			if recs[i].From != recs[i-1].To {
				t.Fatalf("audit trail of %s broken at %d: %+v after %+v", r.id, i, recs[i], recs[i-1])
			}
		}
		if recs[len(recs)-1].To != r.state.String() {
			t.Fatalf("audit trail of %s ends in %s, model %s", r.id, recs[len(recs)-1].To, r.state)
		}
	}
}

func TestServiceStateMachine(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		m := &machine{
			path:   filepath.Join(dir, fmt.Sprintf("run%d.db", run)),
			clk:    clock.NewFake(day0.Add(time.Duration(rapid.IntRange(0, 14*3600).Draw(t, "start")) * time.Second)),
			counts: map[string]int{},
		}
		m.open(t)
		defer func() { _ = m.db.Close() }()
		t.Repeat(map[string]func(*rapid.T){
			"create":  m.create,
			"apply":   m.apply,
			"apply2":  m.apply, // events are the interesting part: twice as likely
			"retry":   m.retry,
			"advance": m.advance,
			"restart": m.restart,
			"":        m.check,
		})
		m.checkAll(t)
	})
}
