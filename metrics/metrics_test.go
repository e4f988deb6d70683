package metrics_test

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/metrics"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/ttl"
)

var day0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const (
	owner     = "acme"
	ownerUser = "slack:UOWNER"
	member    = "slack:U1"
)

// bridge is a requests service on a real bolt file, with or without the
// metrics observer.
type bridge struct {
	db  *bolt.DB
	svc *requests.Service
	m   *metrics.Metrics
}

func open(t testing.TB, path string, observe bool) *bridge {
	t.Helper()
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	svc := requests.NewService(db, clock.NewFake(day0), owner, []string{ownerUser})
	m, err := metrics.New(context.Background(), metrics.Options{Requests: svc, Agents: []string{"coder"}, Surfaces: []string{"slack"}, NoRuntime: true})
	if err != nil {
		t.Fatal(err)
	}
	if observe {
		svc.AddObserver("metrics", m.Observe)
		if err := m.IndexRequests(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return &bridge{db: db, svc: svc, m: m}
}

func ask(agent, user string) requests.Ask {
	return requests.Ask{Agent: agent, Room: "backend", Surface: "slack", User: user, Text: "do it"}
}

// scrape gathers the registry into "name{label=value,...}" → value, labels
// in name order (histograms: their sample count, under name_count).
func scrape(t testing.TB, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			name := mf.GetName()
			var v float64
			switch {
			case mt.Counter != nil:
				v = mt.Counter.GetValue()
			case mt.Gauge != nil:
				v = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				name, v = name+"_count", float64(mt.Histogram.GetSampleCount())
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// expect checks the listed series; the others of the same names must be 0.
func expect(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	names := map[string]bool{}
	for k := range want {
		names[k[:strings.IndexByte(k, '{')]] = true
	}
	for k, v := range got {
		n := k[:strings.IndexByte(k, '{')]
		if names[n] && want[k] != v {
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}
	for k, v := range want {
		if _, ok := got[k]; !ok && v != 0 {
			t.Errorf("%s missing, want %v", k, v)
		}
	}
}

// TestRequestCountsFromTheStore: requests by state and agent, requests
// created and transitions count what committed: a transaction that rolls
// back counts nothing, a transaction the store runs again (bolt re-runs
// a batch without its failed call) counts once. A restart reads the same
// values.
func TestRequestCountsFromTheStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bridge.db")
	b := open(t, path, true)

	owned, err := b.svc.Create(ctx, ask("coder", ownerUser))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := b.svc.Create(ctx, ask("coder", member))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []requests.Event{requests.Start, requests.Finish} {
		if _, err := b.svc.Apply(ctx, owned.ID, requests.Change{Event: ev, Actor: "system:test"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.svc.Apply(ctx, pending.ID, requests.Change{Event: requests.Deny, Actor: ownerUser}); err != nil {
		t.Fatal(err)
	}
	// Progress and illegal transitions change no count.
	if err := b.db.Update(ctx, func(tx store.Tx) error {
		_, err := b.svc.UpdateTx(tx, owned.ID, "", "", "", func(r *requests.Request) { r.Progress = 50 })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Apply(ctx, owned.ID, requests.Change{Event: requests.Start}); !errors.Is(err, requests.ErrIllegalTransition) {
		t.Fatalf("illegal start: %v", err)
	}

	// Concurrent creations, every third rolled back after its create: bolt
	// commits them in batches, re-running a batch without its failed call.
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := 0
	for i := range 60 {
		wg.Go(func() {
			err := b.db.Update(ctx, func(tx store.Tx) error {
				if _, err := b.svc.CreateTx(tx, ask("reviewer", member)); err != nil {
					return err
				}
				if i%3 == 0 {
					return errors.New("rolled back")
				}
				return nil
			})
			if err == nil {
				mu.Lock()
				committed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if committed != 40 {
		t.Fatalf("%d creations committed, want 40", committed)
	}

	want := map[string]float64{
		"roombridge_requests{agent=coder,state=done}":                     1,
		"roombridge_requests{agent=coder,state=cancelled}":                1,
		"roombridge_requests{agent=reviewer,state=pending}":               40,
		"roombridge_requests_created_total{state=approved,surface=slack}": 1,
		"roombridge_requests_created_total{state=pending,surface=slack}":  41,
		"roombridge_request_transitions_total{from=approved,to=running}":  1,
		"roombridge_request_transitions_total{from=running,to=done}":      1,
		"roombridge_request_transitions_total{from=pending,to=cancelled}": 1,
	}
	expect(t, scrape(t, b.m), want)
	// Every state of a configured agent is shown, at zero.
	if v, ok := scrape(t, b.m)["roombridge_requests{agent=coder,state=expired}"]; !ok || v != 0 {
		t.Errorf("coder's expired series: %v %v", v, ok)
	}

	// Restart: a new process reads the same values from the store.
	if err := b.db.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(t, path, true)
	expect(t, scrape(t, b.m), want)
}

// TestIndexRequests: requests written without the observer (an older
// bridge) are counted by a scrape itself until IndexRequests (the leader's
// term start) counts them once in the store; from then on the observer
// keeps the counts.
func TestIndexRequests(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bridge.db")
	old := open(t, path, false)
	for range 3 {
		if _, err := old.svc.Create(ctx, ask("coder", member)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := old.svc.Create(ctx, ask("coder", ownerUser))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.db.Close(); err != nil {
		t.Fatal(err)
	}

	b := open(t, path, false)
	b.svc.AddObserver("metrics", b.m.Observe)
	want := map[string]float64{
		"roombridge_requests{agent=coder,state=pending}":  3,
		"roombridge_requests{agent=coder,state=approved}": 1,
	}
	expect(t, scrape(t, b.m), want) // counted by the scrape
	// A change before the index is made is counted by the index.
	if _, err := b.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start}); err != nil {
		t.Fatal(err)
	}
	run := b.m.Leading(func(context.Context) error { return nil })
	for range 2 { // the second term finds the index made
		if err := run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want = map[string]float64{
		"roombridge_requests{agent=coder,state=pending}": 3,
		"roombridge_requests{agent=coder,state=running}": 1,
	}
	expect(t, scrape(t, b.m), want)
	if _, err := b.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Fail}); err != nil {
		t.Fatal(err)
	}
	want = map[string]float64{
		"roombridge_requests{agent=coder,state=pending}": 3,
		"roombridge_requests{agent=coder,state=failed}":  1,
	}
	got := scrape(t, b.m)
	expect(t, got, want)
	expect(t, got, map[string]float64{"roombridge_is_leader{}": 0, "roombridge_leader_changes_total{}": 2})
}

// TestAuditCounters: approval decisions, expiries and background task
// outcomes are counted from the audit records appended since the metrics
// were made, each once, however many scrapes read them.
func TestAuditCounters(t *testing.T) {
	ctx := context.Background()
	b := open(t, filepath.Join(t.TempDir(), "bridge.db"), true)
	appendRecords := func(actions ...string) {
		t.Helper()
		if err := b.db.Update(ctx, func(tx store.Tx) error {
			for _, a := range actions {
				if err := audit.Append(tx, audit.Record{Time: day0, Actor: "system:test", Action: a}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	appendRecords("approve") // before New: not counted
	m, err := metrics.New(ctx, metrics.Options{Requests: b.svc, NoRuntime: true})
	if err != nil {
		t.Fatal(err)
	}
	appendRecords("approve", "deny", "expire", "task_succeeded", "task_stop", "task_failed")
	want := map[string]float64{
		"roombridge_approval_decisions_total{decision=approved}": 1,
		"roombridge_approval_decisions_total{decision=denied}":   1,
		"roombridge_approval_expiries_total{}":                   1,
		"roombridge_background_tasks_total{outcome=succeeded}":   1,
		"roombridge_background_tasks_total{outcome=failed}":      1,
		"roombridge_background_tasks_total{outcome=stopped}":     0,
		"roombridge_background_tasks_total{outcome=interrupted}": 0,
	}
	expect(t, scrape(t, m), want)
	expect(t, scrape(t, m), want)
	appendRecords("expire", "task_interrupted")
	want["roombridge_approval_expiries_total{}"] = 2
	want["roombridge_background_tasks_total{outcome=interrupted}"] = 1
	expect(t, scrape(t, m), want)
}

// TestHooks: what the packages report through their hooks.
func TestHooks(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), "bridge.db"), true)
	m := b.m
	api := m.APIErrors("slack")
	api("channel_not_found", false)
	api("", true)
	api("", true)
	m.Inbound("slack", "ask", false)
	m.Inbound("slack", "ask", true)
	m.Turn("coder", "final", 2*time.Second)
	m.Delivered("slack", 300*time.Millisecond)
	m.Sweep(ttl.Result{Due: 3, Expired: 2, Skipped: 1, Took: time.Millisecond})
	got := scrape(t, m)
	expect(t, got, map[string]float64{
		"roombridge_platform_api_errors_total{code=channel_not_found,surface=slack}": 1,
		"roombridge_platform_rate_limited_total{surface=slack}":                      2,
		"roombridge_inbound_events_total{kind=ask,surface=slack}":                    2,
		"roombridge_inbound_duplicates_total{surface=slack}":                         1,
		"roombridge_agent_turns_total{agent=coder,outcome=final}":                    1,
		"roombridge_agent_turn_duration_seconds_count{agent=coder}":                  1,
		"roombridge_delivery_latency_seconds_count{surface=slack}":                   1,
		"roombridge_outbox_depth{surface=slack}":                                     0,
		"roombridge_sweep_items_total{result=expired}":                               2,
		"roombridge_sweep_items_total{result=skipped}":                               1,
		"roombridge_sweep_duration_seconds_count{}":                                  1,
	})
	if _, ok := got["roombridge_agent_turns_total{agent=coder,outcome=failed}"]; !ok {
		t.Error("turn outcomes of configured agents start at zero")
	}
}

// TestUsage: what agents' turns cost adds up per agent: tokens by type,
// dollars.
func TestUsage(t *testing.T) {
	m := open(t, filepath.Join(t.TempDir(), "bridge.db"), true).m
	m.Usage("coder", requests.Usage{Turns: 1, InputTokens: 12, OutputTokens: 96, CacheReadTokens: 100, CostUSD: 0.02})
	m.Usage("coder", requests.Usage{Turns: 1, InputTokens: 8, CacheWriteTokens: 50, CostUSD: 0.01})
	expect(t, scrape(t, m), map[string]float64{
		"roombridge_agent_tokens_total{agent=coder,type=input}":       20,
		"roombridge_agent_tokens_total{agent=coder,type=output}":      96,
		"roombridge_agent_tokens_total{agent=coder,type=cache_read}":  100,
		"roombridge_agent_tokens_total{agent=coder,type=cache_write}": 50,
		"roombridge_agent_cost_dollars_total{agent=coder}":            0.03,
	})
}

// TestOutboxDepthCountsSpans: the outbox depth counts an effect that
// stands for several (an expiry's, expanded at delivery) as those it
// stands for, per surface.
func TestOutboxDepthCountsSpans(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), "bridge.db"), true)
	err := b.db.Update(context.Background(), func(tx store.Tx) error {
		for _, e := range []store.Effect{
			{Queue: "slack/R1", Payload: []byte(`{}`)},
			{Queue: "slack/R2", Payload: []byte(`{}`), Span: 5},
			{Queue: "feishu/R3", Payload: []byte(`{}`)},
		} {
			if err := store.Enqueue(tx, &e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, scrape(t, b.m), map[string]float64{
		"roombridge_outbox_depth{surface=slack}":  6,
		"roombridge_outbox_depth{surface=feishu}": 1,
	})
}
