package metrics

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// bucket holds the counters Observe keeps, per owner:
//
//	requests/<owner>                       marker: the counts below are complete
//	requests/<owner>/<state>/<agent>       requests in state (int64)
//	created/<owner>/<surface>/<state>      requests created (in their first state)
//	transitions/<owner>/<from>/<to>        state changes
const bucket = "metrics"

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 3 * time.Second

// taskOutcomes are the ends of background tasks (audit actions task_<outcome>).
var taskOutcomes = []string{delegation.TaskSucceeded, delegation.TaskFailed, delegation.TaskStopped, delegation.TaskInterrupted}

func countsMarker(owner string) string { return "requests/" + owner }

func countKey(owner string, s requests.State, agent string) string {
	return "requests/" + owner + "/" + s.String() + "/" + agent
}

// add adds delta to the counter at key.
func add(tx store.Tx, key string, delta int64) error {
	v, err := get(tx, key)
	if err != nil {
		return err
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v+delta))
	return tx.Put(bucket, key, b[:])
}

// get reads the counter at key (0 if absent).
func get(tx store.Tx, key string) (int64, error) {
	b, err := tx.Get(bucket, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("metrics: %w", err)
	case len(b) != 8:
		return 0, nil // not ours to fail a request over: IndexRequests rewrites counts
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// Observe is a requests.Observer: in the transaction of each change it
// keeps the store's counters of requests by state and agent, requests
// created, and transitions. A change that only edits a request (progress,
// session) costs nothing; a creation two counter writes, a transition three.
func (m *Metrics) Observe(tx store.Tx, before, after *requests.Request) error {
	o := after.Owner
	if before == nil {
		if err := add(tx, countKey(o, after.State, after.Agent), 1); err != nil {
			return err
		}
		return add(tx, "created/"+o+"/"+after.Surface+"/"+after.State.String(), 1)
	}
	if before.State == after.State && before.Agent == after.Agent {
		return nil
	}
	if err := add(tx, countKey(o, before.State, before.Agent), -1); err != nil {
		return err
	}
	if err := add(tx, countKey(o, after.State, after.Agent), 1); err != nil {
		return err
	}
	if before.State == after.State {
		return nil
	}
	return add(tx, "transitions/"+o+"/"+before.State.String()+"/"+after.State.String(), 1)
}

// IndexRequests makes the counts of requests by state and agent complete,
// once per store: a store whose requests predate Observe (or an older
// bridge) is counted in one transaction, which then marks the counts
// complete. Until then a scrape counts the requests themselves. Run it
// where writes are allowed (the leader); it is a no-op afterwards.
func (m *Metrics) IndexRequests(ctx context.Context) error {
	owner := m.svc.Owner()
	err := m.svc.Store().Update(ctx, func(tx store.Tx) error {
		if _, err := tx.Get(bucket, countsMarker(owner)); err == nil || !errors.Is(err, store.ErrNotFound) {
			return err
		}
		p := countsMarker(owner) + "/"
		var stale []string
		if err := tx.Scan(bucket, p, store.PrefixEnd(p), func(k string, _ []byte) error {
			stale = append(stale, k)
			return nil
		}); err != nil {
			return err
		}
		for _, k := range stale {
			if err := tx.Delete(bucket, k); err != nil {
				return err
			}
		}
		counts := map[string]int64{}
		if err := m.svc.EachTx(tx, func(r *requests.Request) error {
			counts[countKey(owner, r.State, r.Agent)]++
			return nil
		}); err != nil {
			return err
		}
		for k, n := range counts {
			if err := add(tx, k, n); err != nil {
				return err
			}
		}
		return tx.Put(bucket, countsMarker(owner), []byte("1"))
	})
	if err != nil {
		return fmt.Errorf("metrics: index requests: %w", err)
	}
	return nil
}

// storeCollector reads, at scrape time, the store's counters and outbox,
// and the audit records appended since the previous scrape.
type storeCollector struct {
	svc      *requests.Service
	agents   []string
	surfaces []string
	log      *slog.Logger

	requests, created, transitions, outbox, decisions, expiries, tasks *prometheus.Desc

	mu       sync.Mutex // one tail at a time; guards what follows
	cursor   audit.Cursor
	decided  map[string]float64 // by decision
	expired  float64
	taskEnds map[string]float64 // by outcome
}

func newStoreCollector(svc *requests.Service, agents, surfaces []string, cursor audit.Cursor, log *slog.Logger) *storeCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	c := &storeCollector{
		svc: svc, agents: agents, surfaces: surfaces, log: log, cursor: cursor,
		requests:    desc("requests", "Requests by state and agent (from the store).", "state", "agent"),
		created:     desc("requests_created_total", "Requests created, by surface and first state: approved (an owner's) or pending (from the store).", "surface", "state"),
		transitions: desc("request_transitions_total", "Request state changes by from and to state (from the store).", "from", "to"),
		outbox:      desc("outbox_depth", "Effects waiting in the outbox, by surface (from the store).", "surface"),
		decisions:   desc("approval_decisions_total", "Approval decisions by decision: approved or denied (from the audit log, since this instance started).", "decision"),
		expiries:    desc("approval_expiries_total", "Approvals that expired (from the audit log, since this instance started)."),
		tasks:       desc("background_tasks_total", "Background tasks that ended, by outcome: succeeded, failed, stopped or interrupted (from the audit log, since this instance started).", "outcome"),
		decided:     map[string]float64{"approved": 0, "denied": 0},
		taskEnds:    map[string]float64{},
	}
	for _, o := range taskOutcomes {
		c.taskEnds[o] = 0
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.created, c.transitions, c.outbox, c.decisions, c.expiries, c.tasks} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	c.collectAudit(ctx, ch)
	if err := c.collectStore(ctx, ch); err != nil {
		c.log.Error("metrics: reading the store", "error", err)
		ch <- prometheus.NewInvalidMetric(c.requests, err)
	}
}

// collectAudit counts the audit records appended since the last scrape.
func (c *storeCollector) collectAudit(ctx context.Context, ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := audit.Tail(ctx, c.svc.Store(), c.cursor, func(r *audit.Record) error {
		switch {
		case r.Action == requests.Approve.String():
			c.decided["approved"]++
		case r.Action == requests.Deny.String():
			c.decided["denied"]++
		case r.Action == requests.Expire.String():
			c.expired++
		case strings.HasPrefix(r.Action, "task_"):
			if o := strings.TrimPrefix(r.Action, "task_"); slices.Contains(taskOutcomes, o) {
				c.taskEnds[o]++
			}
		}
		return nil
	})
	if err != nil {
		// The counts stay where they were; the next scrape reads on.
		c.log.Error("metrics: reading the audit log", "error", err)
		ch <- prometheus.NewInvalidMetric(c.decisions, err)
		return
	}
	c.cursor = next
	for d, n := range c.decided {
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, n, d)
	}
	ch <- prometheus.MustNewConstMetric(c.expiries, prometheus.CounterValue, c.expired)
	for o, n := range c.taskEnds {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.CounterValue, n, o)
	}
}

// snapshot is what collectStore reads from the store: request counts by
// state and agent, created by surface and state, transitions by from and to,
// and the outbox depth by surface.
type snapshot struct {
	counts, created, trans map[[2]string]int64
	depth                  map[string]int64
}

// collectStore reads the counters Observe keeps and the outbox, in one
// snapshot.
func (c *storeCollector) collectStore(ctx context.Context, ch chan<- prometheus.Metric) error {
	snap := snapshot{counts: map[[2]string]int64{}, created: map[[2]string]int64{}, trans: map[[2]string]int64{}, depth: map[string]int64{}}
	for _, s := range c.surfaces {
		snap.depth[s] = 0
	}
	err := c.svc.Store().View(ctx, func(tx store.Tx) error { return c.readSnapshot(tx, snap) })
	if err != nil {
		return err
	}
	c.emitSnapshot(ch, snap)
	return nil
}

// readSnapshot fills snap (cleared first: a transaction may run again) from
// tx.
func (c *storeCollector) readSnapshot(tx store.Tx, snap snapshot) error {
	owner := c.svc.Owner()
	clear(snap.counts)
	clear(snap.created)
	clear(snap.trans)
	if err := c.readCounts(tx, owner, snap.counts); err != nil {
		return err
	}
	if err := scanPairs(tx, "created/"+owner+"/", snap.created); err != nil {
		return err
	}
	if err := scanPairs(tx, "transitions/"+owner+"/", snap.trans); err != nil {
		return err
	}
	for s := range snap.depth {
		snap.depth[s] = 0
	}
	effects, err := store.PendingEffects(tx, 0)
	if err != nil {
		return err
	}
	for _, e := range effects {
		surface, _, _ := strings.Cut(e.Queue, "/")
		snap.depth[surface] += int64(max(e.Span, 1)) // an effect expanded at delivery counts as those it stands for
	}
	return nil
}

// scanPairs reads the counters under prefix p into into, keyed by the two
// label values after it (the second may hold slashes: agents).
func scanPairs(tx store.Tx, p string, into map[[2]string]int64) error {
	return tx.Scan(bucket, p, store.PrefixEnd(p), func(k string, v []byte) error {
		a, b, ok := strings.Cut(strings.TrimPrefix(k, p), "/")
		if ok && len(v) == 8 {
			into[[2]string{a, b}] = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
}

// readCounts reads the request counts by state and agent: the counters
// Observe keeps or, before IndexRequests has run on this store, the
// requests themselves.
func (c *storeCollector) readCounts(tx store.Tx, owner string, counts map[[2]string]int64) error {
	_, err := tx.Get(bucket, countsMarker(owner))
	switch {
	case err == nil:
		return scanPairs(tx, countsMarker(owner)+"/", counts)
	case errors.Is(err, store.ErrNotFound):
		// Not indexed yet (IndexRequests has not run on this store):
		// count the requests themselves.
		return c.svc.EachTx(tx, func(r *requests.Request) error {
			counts[[2]string{r.State.String(), r.Agent}]++
			return nil
		})
	default:
		return err
	}
}

// emitSnapshot sends snap's metrics: requests of every configured (or
// counted) agent in every state, created, transitions and outbox depth.
func (c *storeCollector) emitSnapshot(ch chan<- prometheus.Metric, snap snapshot) {
	agents := slices.Clone(c.agents)
	for k := range snap.counts {
		if !slices.Contains(agents, k[1]) {
			agents = append(agents, k[1])
		}
	}
	for _, a := range agents {
		for _, s := range requests.States {
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(snap.counts[[2]string{s.String(), a}]), s.String(), a)
		}
	}
	for k, n := range snap.created {
		ch <- prometheus.MustNewConstMetric(c.created, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for k, n := range snap.trans {
		ch <- prometheus.MustNewConstMetric(c.transitions, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for s, n := range snap.depth {
		ch <- prometheus.MustNewConstMetric(c.outbox, prometheus.GaugeValue, float64(n), s)
	}
}
