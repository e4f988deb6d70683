// Package metrics is the bridge's Prometheus metrics, served at GET /metrics
// (github.com/prometheus/client_golang). It observes rather than
// instruments; every value comes from one of three places:
//
//   - The store, read at scrape time: requests by state and agent,
//     requests created, transitions, and the outbox depth. Counts and
//     transitions are counters kept in the store by a requests.Observer
//     (Observe) in the transaction of each change, so they count only
//     what commits, count a re-run transaction once, and are right after a
//     restart or a failover (every instance reports the same values).
//   - The audit log, read incrementally at scrape time (audit.Tail):
//     approval decisions and expiries, and background tasks by outcome,
//     counted from this instance's start.
//   - Small hooks of the packages that alone know a thing (the sweeper's
//     runs, the outbox's deliveries, platform API errors, inbound events,
//     agent turns, leadership), counted in memory by this instance.
//
// Names follow Prometheus conventions (roombridge_…_total for counters,
// _seconds in base units); labels take values from small fixed sets (states,
// surfaces, configured agents, platform error codes), never request IDs.
package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/ttl"
)

// namespace prefixes every metric name.
const namespace = "roombridge"

// Turn outcomes (the outcome label of roombridge_agent_turns_total), as the
// agents scheduler reports them.
var turnOutcomes = []string{agents.TurnFinal, agents.TurnYielded, agents.TurnFailed, agents.TurnStopped, agents.TurnInterrupted}

// Options configure Metrics.
type Options struct {
	// Requests is the request service (required): its store and owner.
	Requests *requests.Service
	// Agents are the configured agents, and Surfaces the surfaces with a
	// connector: their series are shown at zero rather than missing.
	Agents   []string
	Surfaces []string
	// Log receives scrape failures (default: discarded).
	Log *slog.Logger
	// NoRuntime leaves out the Go runtime and process collectors (tests).
	NoRuntime bool
}

// Metrics owns the bridge's collectors and their registry.
type Metrics struct {
	reg   *prometheus.Registry
	svc   *requests.Service
	log   *slog.Logger
	store *storeCollector

	sweepDuration   prometheus.Histogram
	sweepItems      *prometheus.CounterVec
	deliveryLatency *prometheus.HistogramVec
	apiErrors       *prometheus.CounterVec
	rateLimited     *prometheus.CounterVec
	inbound         *prometheus.CounterVec
	duplicates      *prometheus.CounterVec
	turns           *prometheus.CounterVec
	tokens          *prometheus.CounterVec
	cost            *prometheus.CounterVec
	turnDuration    *prometheus.HistogramVec
	isLeader        prometheus.Gauge
	leaderChanges   prometheus.Counter
}

// New returns the metrics of one bridge, registered in a new registry. The
// audit-derived counters start at the log's end now.
func New(ctx context.Context, o Options) (*Metrics, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cursor, err := audit.End(ctx, o.Requests.Store(), o.Requests.Clock().Now())
	if err != nil {
		return nil, err
	}
	m := &Metrics{reg: prometheus.NewRegistry(), svc: o.Requests, log: log}
	m.newSweepMetrics()
	m.newPlatformMetrics()
	m.newAgentMetrics()
	m.newLeaderMetrics()
	m.store = newStoreCollector(o.Requests, o.Agents, o.Surfaces, cursor, log)
	m.reg.MustRegister(m.store, m.sweepDuration, m.sweepItems, m.deliveryLatency, m.apiErrors, m.rateLimited,
		m.inbound, m.duplicates, m.turns, m.turnDuration, m.tokens, m.cost, m.isLeader, m.leaderChanges)
	if !o.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m.zeroKnown(o)
	return m, nil
}

// newSweepMetrics makes the expiry sweeper's metrics.
func (m *Metrics) newSweepMetrics() {
	m.sweepDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: "sweep_duration_seconds",
		Help:    "How long each run of the expiry sweeper took.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms … 4.4 min
	})
	m.sweepItems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "sweep_items_total",
		Help: "Due items the sweeper handled, by result: expired, skipped (settled meanwhile) or failed (retried next run).",
	}, []string{"result"})
}

// newPlatformMetrics makes the metrics of deliveries, platform API calls and
// inbound events.
func (m *Metrics) newPlatformMetrics() {
	m.deliveryLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "delivery_latency_seconds",
		Help:    "Time from an effect's enqueueing in the outbox to its delivery, per surface.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12), // 10 ms … 4 min
	}, []string{"surface"})
	m.apiErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "platform_api_errors_total",
		Help: "Failed platform API calls by surface and code (the platform's error code, http_<status>, or transport), rate limits excluded.",
	}, []string{"surface", "code"})
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "platform_rate_limited_total",
		Help: "Platform API calls refused by a rate limit (HTTP 429 and the platforms' rate-limit codes), by surface.",
	}, []string{"surface"})
	m.inbound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "inbound_events_total",
		Help: "Inbound chat events handled, duplicates included, by surface and kind.",
	}, []string{"surface", "kind"})
	m.duplicates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "inbound_duplicates_total",
		Help: "Inbound chat events dropped as duplicates of one seen before (platform retries), by surface.",
	}, []string{"surface"})
}

// newAgentMetrics makes the metrics of agent turns: outcomes, durations,
// tokens and cost.
func (m *Metrics) newAgentMetrics() {
	m.turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "agent_turns_total",
		Help: "Agent turns by agent and outcome: final, yielded, failed, stopped (cancelled), interrupted (shutdown).",
	}, []string{"agent", "outcome"})
	m.turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "agent_turn_duration_seconds",
		Help:    "How long agent turns took, by agent.",
		Buckets: prometheus.ExponentialBuckets(0.1, 3, 10), // 100 ms … 33 min
	}, []string{"agent"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "agent_tokens_total",
		Help: "Tokens the agents' turns used, as the models reported them, by agent and type: input, output, cache_read, cache_write.",
	}, []string{"agent", "type"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "agent_cost_dollars_total",
		Help: "What the agents' turns cost in dollars, as the models reported it, by agent.",
	}, []string{"agent"})
}

// newLeaderMetrics makes the leadership metrics.
func (m *Metrics) newLeaderMetrics() {
	m.isLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "is_leader",
		Help: "1 while this instance does the leader's work, else 0.",
	})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "leader_changes_total",
		Help: "Times this instance became the leader (summed over instances: the changes of leader).",
	})
}

// zeroKnown starts the series of known label values at zero (a rate over a
// missing series is no rate at all).
func (m *Metrics) zeroKnown(o Options) {
	for _, r := range []string{"expired", "skipped", "failed"} {
		m.sweepItems.WithLabelValues(r)
	}
	for _, s := range o.Surfaces {
		m.rateLimited.WithLabelValues(s)
		m.duplicates.WithLabelValues(s)
	}
	for _, a := range o.Agents {
		for _, out := range turnOutcomes {
			m.turns.WithLabelValues(a, out)
		}
	}
}

// Registry is what GET /metrics serves (httpapi.Options.Registry).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Sweep records one run of the expiry sweeper (ttl.Options.OnSweep).
func (m *Metrics) Sweep(r ttl.Result) {
	m.sweepDuration.Observe(r.Took.Seconds())
	m.sweepItems.WithLabelValues("expired").Add(float64(r.Expired))
	m.sweepItems.WithLabelValues("skipped").Add(float64(r.Skipped))
	m.sweepItems.WithLabelValues("failed").Add(float64(r.Failed))
}

// Delivered records an effect delivered on surface, latency after it was
// enqueued (threads.Deliverer.OnDelivered).
func (m *Metrics) Delivered(surface string, latency time.Duration) {
	m.deliveryLatency.WithLabelValues(surface).Observe(latency.Seconds())
}

// APIErrors returns the hook a connector of surface reports its failed API
// calls to: code is the platform's error code (or http_<status>, or
// transport); rateLimited marks a refusal by a rate limit, counted apart.
func (m *Metrics) APIErrors(surface string) func(code string, rateLimited bool) {
	return func(code string, rateLimited bool) {
		if rateLimited {
			m.rateLimited.WithLabelValues(surface).Inc()
			return
		}
		m.apiErrors.WithLabelValues(surface, code).Inc()
	}
}

// Inbound records an inbound chat event, and whether it was dropped as a
// duplicate (rooms.Router.OnInbound).
func (m *Metrics) Inbound(surface string, kind chat.EventKind, duplicate bool) {
	m.inbound.WithLabelValues(surface, string(kind)).Inc()
	if duplicate {
		m.duplicates.WithLabelValues(surface).Inc()
	}
}

// Turn records an agent turn: how it ended and how long it took
// (agents.Scheduler.OnTurn).
func (m *Metrics) Turn(agent, outcome string, took time.Duration) {
	m.turns.WithLabelValues(agent, outcome).Inc()
	m.turnDuration.WithLabelValues(agent).Observe(took.Seconds())
}

// Usage records what an agent's turn cost (agents.Scheduler.OnUsage).
func (m *Metrics) Usage(agent string, u requests.Usage) {
	for typ, n := range map[string]int64{"input": u.InputTokens, "output": u.OutputTokens,
		"cache_read": u.CacheReadTokens, "cache_write": u.CacheWriteTokens} {
		if n > 0 {
			m.tokens.WithLabelValues(agent, typ).Add(float64(n))
		}
	}
	if u.CostUSD > 0 {
		m.cost.WithLabelValues(agent).Add(u.CostUSD)
	}
}

// Leading wraps the leader's work: while it runs this instance is the
// leader (roombridge_is_leader is 1), and each start counts as a change of
// leader. A term starts by making the store's counts of requests complete
// (IndexRequests: once per store; a failure is logged, and scrapes count
// the requests themselves meanwhile).
func (m *Metrics) Leading(work func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		m.leaderChanges.Inc()
		m.isLeader.Set(1)
		defer m.isLeader.Set(0)
		if err := m.IndexRequests(ctx); err != nil && ctx.Err() == nil {
			m.log.WarnContext(ctx, "metrics: counting requests by state failed; scrapes count them meanwhile", "error", err)
		}
		return work(ctx)
	}
}
