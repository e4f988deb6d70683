// Package core assembles a whole bridge from a config, a store, a clock, a
// logger and the connectors: the request service and its observers, the
// approvals, delegation and agent tools, the scheduler, the outbox, the
// sweeper, the rooms router, the HTTP API and the supervisor of the leader's
// work. It is the one place that wires the core; cmd/bridge and every test
// that needs a running bridge call New.
package core

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/agents/process"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/delegation/mcptools"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/metrics"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/runners"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
	"github.com/roombridge/roombridge/web"
)

// Options is what a bridge is built from.
type Options struct {
	// Config is the validated configuration (required).
	Config *config.Config
	// Store holds all state (required).
	Store store.Store
	// Clock defaults to the real one.
	Clock clock.Clock
	// Log defaults to discarding.
	Log *slog.Logger
	// Connectors are the chat surfaces. The core reaches their optional
	// abilities through interfaces of its own: webhook routes (Routes),
	// API error reports (ReportAPIErrors).
	Connectors []chat.Connector
	// APIToken is the bearer token of the HTTP API's /v1 routes.
	APIToken string
	// APIAddr is the host:port the HTTP API is reached at: agent processes
	// get the agent tools' URL from it ("": agents get no tools).
	APIAddr string
	// Leadership is how this bridge leads (nil: a single node, which leads
	// from the start).
	Leadership Leadership
	// AuditRetention, if set, is how long audit records are kept: the
	// leader prunes older ones hourly.
	AuditRetention time.Duration
	// Runtimes, if set, gives an agent's runtime instead of the one its
	// config describes (tests: the test binary as the demo agent). A nil
	// runtime leaves the agent out of the scheduler: its requests are
	// moved by hand (tests of delegation's caps).
	Runtimes func(name string, a config.Agent) (agents.Runtime, error)
	// Surfaces lists the surfaces the outbox delivers to (default: the
	// connectors'). Tests that only inspect the outbox name them here.
	Surfaces []string
	// HoldOutbox leaves every effect in the outbox, undelivered (tests that
	// read a thread's effects there).
	HoldOutbox bool
	// NoRuntimeMetrics leaves the Go runtime and process collectors out of
	// the metrics (tests that scrape exact series).
	NoRuntimeMetrics bool
	// Instance is this instance as /readyz shows it (default Self("")).
	Instance Instance
	// RunnerWatch, if set, is how often the runners' watchdog looks for
	// silent runners (default: half the heartbeat); tests with a fake
	// clock make it short.
	RunnerWatch time.Duration
}

// Leadership is the backend's election: single node or HA.
type Leadership interface {
	// Lead runs work while this instance leads, and returns when ctx ends
	// or work fails.
	Lead(ctx context.Context, work func(context.Context) error) error
	// Leading answers /readyz.
	Leading() bool
	// Claim fails once this instance no longer leads: every send to a
	// chat platform starts with it (nil: no fence).
	Claim(ctx context.Context) error
}

// Bridge is an assembled bridge.
type Bridge struct {
	opts     Options
	log      *slog.Logger
	svc      *requests.Service
	rooms    *directory.Rooms
	threads  *threads.Threads
	appr     *approvals.Service
	del      *delegation.Service
	router   *rooms.Router
	sched    *agents.Scheduler
	live     *threads.Live
	deliver  *threads.Deliverer
	sweeper  *ttl.Sweeper
	tools    *mcptools.Server
	runners  *runners.Hub
	met      *metrics.Metrics
	api      *httpapi.Server
	web      *web.Server // nil unless web.enabled
	handler  http.Handler
	cert     *tls.Certificate // the API port's (nil: plaintext)
	stop     *stopping
	intake   []job
	surfaces []string
	// storeFormat is the store's format as of this instance's last term
	// start (0: not led yet).
	storeFormat atomic.Int64
	// migrated: this term's leader work has brought the store to this
	// binary's format (HA: /readyz is ready only then).
	migrated atomic.Bool
}

// webhooks is a connector that receives platform callbacks over the API's
// HTTP server (Slack Events API, Feishu HTTP callback): mux patterns ("POST
// /slack/events") to handlers that hand events to h.
type webhooks interface {
	Routes(h chat.Handler) map[string]http.Handler
}

// apiErrorReporter is a connector that reports its failed platform calls
// (metrics).
type apiErrorReporter interface {
	ReportAPIErrors(hook func(code string, rateLimited bool))
}

// New builds a bridge. Nothing runs until Lead; Handler serves at once.
func New(ctx context.Context, o Options) (*Bridge, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	cfg := o.Config
	b := &Bridge{opts: o, log: o.Log, surfaces: o.Surfaces, stop: newStopping(cfg.Shutdown.Grace, o.Log)}
	cert, err := cfg.HTTP.Certificate()
	if err != nil {
		return nil, err
	}
	b.cert = cert
	if b.surfaces == nil {
		for _, c := range o.Connectors {
			b.surfaces = append(b.surfaces, c.Surface())
		}
	}
	b.svc = requests.NewService(o.Store, o.Clock, cfg.Owner, cfg.Owners)
	b.svc.SetQueueLimit(cfg.Requests.Queue())
	b.svc.SetMaxBytes(cfg.Limits.RequestBytes)
	if err := b.services(ctx); err != nil {
		return nil, err
	}
	if err := b.scheduler(); err != nil {
		return nil, err
	}
	b.leaderJobs()
	b.http()
	return b, nil
}

// agentNames are the configured agents, sorted.
func (b *Bridge) agentNames() []string {
	names := make([]string, 0, len(b.opts.Config.Agents))
	for name := range b.opts.Config.Agents {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// services builds the request observers, in their order (see Observers),
// and the router and sweeper that act on them.
func (b *Bridge) services(ctx context.Context) error {
	cfg, log := b.opts.Config, b.log
	met, err := metrics.New(ctx, metrics.Options{Requests: b.svc, Agents: b.agentNames(), Surfaces: b.surfaces,
		Log: log, NoRuntime: b.opts.NoRuntimeMetrics})
	if err != nil {
		return err
	}
	b.met = met
	b.rooms = directory.New(cfg.Rooms, cfg.Owners, b.surfaces...)
	b.threads = threads.New(b.rooms)
	b.threads.SetRequests(b.svc) // a delegated request's title names the agent that asked
	b.appr = approvals.New(approvals.Options{Requests: b.svc, Rooms: b.rooms, TTL: cfg.Approvals.TTL,
		Remind: cfg.Approvals.Remind, Threads: b.threads, Log: log})
	caps := map[string]int{}
	for name, a := range cfg.Agents {
		caps[name] = a.MaxBackgroundTasks
	}
	b.del = delegation.New(delegation.Options{Requests: b.svc, Agents: b.agentNames(), MaxTasks: caps,
		RendezvousTimeout: cfg.Delegation.RendezvousTimeout, Workdir: cfg.DataDir, Threads: b.threads, Log: log})
	for _, o := range observers(b) {
		b.svc.AddObserver(o.name, o.fn)
	}
	b.router = rooms.New(b.svc, b.appr, b.rooms, b.del, log)
	b.router.OnInbound = met.Inbound
	b.hub()              // before the web room: its room pages list the runners
	if cfg.Web.Enabled { // the web room: its observer runs last, its "web" command signs people in
		b.web = web.New(web.Options{Requests: b.svc, Approvals: b.appr, Rooms: b.rooms, Actions: b.router, Tasks: b.del, Runners: b.runners,
			Token: b.opts.APIToken, PublicURL: cfg.Web.PublicURL, Addr: b.opts.APIAddr, TLS: b.cert != nil, Log: log})
		b.svc.AddObserver("web", b.web.Observe)
		b.router.SignIn = b.web.SignInLink
		b.appr.OnRevoke(b.web.EndSessions)
		b.threads.Links, b.appr.Links = b.web.RequestURL, b.web.RequestURL // "Open" on parents and cards (with web.public_url)
		if err := b.web.Backfill(ctx); err != nil {
			return err
		}
	}
	for _, c := range b.opts.Connectors {
		if r, ok := c.(apiErrorReporter); ok {
			r.ReportAPIErrors(met.APIErrors(c.Surface()))
		}
	}
	// The sweeper expires approvals and times out rendezvous.
	b.sweeper, err = ttl.New(ttl.Options{Spec: cfg.Approvals.Sweep, Clock: b.opts.Clock, Log: log, OnSweep: met.Sweep,
		Notices: []ttl.Expirer{b.appr.Notices()}}, b.appr, b.del)
	return err
}

// observer is a request observer and the name it is registered under.
type observer struct {
	name string
	fn   requests.Observer
}

// observers are the request observers in the order they must run, each in
// the transaction of every change:
//   - metrics keeps the store's request counts;
//   - threads starts a new request's thread and updates its parent;
//   - approvals after threads: an approval card is a reply in the thread
//     that the threads observer starts;
//   - delegation last: it closes a rendezvous and answers the asker when
//     the delegated request ends, after that request's own thread has its
//     outcome.
func observers(b *Bridge) []observer {
	return []observer{
		{"metrics", b.met.Observe},
		{threads.ObserverName, b.threads.Observe},
		{approvals.ObserverName, b.appr.Observe},
		{"delegation", b.del.Observe},
	}
}

// hub builds the runners' hub: the agents hosted on other machines.
func (b *Bridge) hub() {
	cfg := b.opts.Config
	var leading func() bool
	if l := b.opts.Leadership; l != nil {
		leading = l.Leading
	}
	b.runners = runners.NewHub(runners.HubOptions{Store: b.opts.Store, Clock: b.opts.Clock, Log: b.log,
		Hosts: cfg.RunnerHosts(), Grace: cfg.Runners.Grace, Heartbeat: cfg.Runners.Heartbeat, Watch: b.opts.RunnerWatch,
		Leading: leading, LeaderURL: b.leaderURL, Requests: b.svc, Tasks: b.del})
	b.del.Remote = b.runners // a runner-hosted agent's background commands run on its runner
	b.met.Registry().MustRegister(b.runners)
}

// scheduler builds the agents' runtimes and the scheduler, linked to
// approvals (request_approval), delegation (ask_agent, background tasks)
// and the agent tools over MCP: the scheduler issues a token for each turn
// and hands it to the agent with the URL; each tool call goes through the
// scheduler's dispatcher, as the exec protocol's calls do.
func (b *Bridge) scheduler() error {
	cfg := b.opts.Config
	runtime := b.opts.Runtimes
	if runtime == nil {
		runtime = func(name string, a config.Agent) (agents.Runtime, error) {
			if a.Kind == "runner" {
				return b.runners.Runtime(name), nil
			}
			return runtimeFor(cfg, name, a)
		}
	}
	var ags []agents.Agent
	for _, name := range b.agentNames() {
		rt, err := runtime(name, cfg.Agents[name])
		if err != nil {
			return err
		}
		if rt != nil {
			ags = append(ags, agents.Agent{Name: name, Runtime: rt})
		}
	}
	b.sched = agents.NewScheduler(b.svc, b.threads, b.log, ags...)
	b.sched.Approver = b.appr
	b.sched.Delegator = b.del
	b.sched.OnTurn = b.met.Turn
	b.sched.OnUsage = b.met.Usage
	b.sched.Tasks = mcptools.Tasks{Requests: b.svc, Delegation: b.del} // task_status
	b.tools = mcptools.New(mcptools.Options{Requests: b.svc, Calls: b.sched, Log: b.log})
	b.sched.Tools = b.tools
	if b.opts.APIAddr != "" {
		// the agents on this host reach /mcp over TLS too, with http.tls_*
		b.sched.MCPURL = mcptools.URL(b.opts.Config.HTTP.Scheme(), b.opts.APIAddr)
	}
	return nil
}

// leaderJobs builds the outbox and lists the intake: the sweeper, the
// connectors and retention.
func (b *Bridge) leaderJobs() {
	conns := b.opts.Connectors
	if l := b.opts.Leadership; l != nil {
		conns = make([]chat.Connector, len(b.opts.Connectors))
		for i, c := range b.opts.Connectors {
			conns[i] = threads.Fenced(c, l.Claim)
		}
	}
	b.deliver = threads.NewDeliverer(b.opts.Store, b.opts.Clock, b.log, conns...)
	b.deliver.OnDelivered = b.met.Delivered
	b.deliver.Expand = b.threads.ExpandTx
	b.live = threads.NewLive(b.threads, b.opts.Store, b.opts.Clock, b.log, conns...)
	b.deliver.Live = b.live
	b.sched.Live = b.live
	if b.web != nil {
		b.web.SetLive(b.live) // request pages show the answer as it is written
	}
	b.intake = []job{{"sweeper", b.sweeper.Run}}
	for _, c := range b.opts.Connectors {
		b.intake = append(b.intake, job{c.Surface(), func(ctx context.Context) error { return c.Run(ctx, b.router) }})
	}
	b.intake = append(b.intake, job{"runners", b.runners.Run}, job{"runner tasks", b.del.WatchRemote})
	var expiries []expiry
	if b.web != nil {
		expiries = append(expiries, expiry{"web sign-in links and sessions", b.web.Sweep})
	}
	b.intake = append(b.intake, job{"retention", func(ctx context.Context) error {
		return retention(ctx, b.opts.Store, b.opts.Clock, b.opts.AuditRetention, b.log, expiries...)
	}})
}

// http builds the API: /v1, health, metrics, the agent tools at /mcp and
// the connectors' webhooks, behind the graceful stop's gate.
func (b *Bridge) http() {
	var ready func() bool
	if l := b.opts.Leadership; l != nil {
		ready = func() bool { return l.Leading() && b.migrated.Load() }
	}
	b.api = httpapi.New(httpapi.Options{Service: b.svc, Router: b.router, Token: b.opts.APIToken, Log: b.log,
		Ready: ready, Detail: b.readyDetail, Tasks: b.del, Registry: b.met.Registry(), WriteTimeout: b.ServerOptions().WriteTimeout})
	b.api.HandleStream("GET /v1/store/backup", "application/x-ndjson", b.writeBackup)
	b.api.MountStream("/mcp", b.tools)
	b.api.Mount(runners.Pattern, httpapi.LongLived(b.runners.Handler()))
	for pattern, h := range b.runners.API(b.opts.APIToken) {
		b.api.Mount(pattern, h)
	}
	for _, c := range b.opts.Connectors {
		if w, ok := c.(webhooks); ok {
			for pattern, h := range w.Routes(b.router) {
				b.api.Mount(pattern, h)
			}
		}
	}
	if b.web != nil {
		b.api.Mount("/", b.web)
	}
	b.handler = b.stop.gate(b.api)
}

// ServerOptions are the HTTP server's limits from the config (http.*), for
// httpapi.NewServer.
func (b *Bridge) ServerOptions() httpapi.ServerOptions {
	read, write, idle := b.opts.Config.HTTP.Timeouts()
	return httpapi.ServerOptions{ReadTimeout: read, WriteTimeout: write, IdleTimeout: idle,
		MaxConnsPerClient: b.opts.Config.HTTP.ConnsPerClient(), TLS: b.cert, Log: b.log}
}

// URL is the base URL of the HTTP API: https with http.tls_cert_file,
// else http, and Options.APIAddr.
func (b *Bridge) URL() string { return b.opts.Config.HTTP.Scheme() + "://" + b.opts.APIAddr }

// Handler serves the HTTP API (and webhooks, and /mcp); once a graceful
// stop has begun it refuses new work.
func (b *Bridge) Handler() http.Handler { return b.handler }

// Web is the web room (nil unless web.enabled).
func (b *Bridge) Web() *web.Server { return b.web }

// Observers names the request observers in the order they run.
func (b *Bridge) Observers() []string { return b.svc.Observers() }

// Requests is the request service.
func (b *Bridge) Requests() *requests.Service { return b.svc }

// Router is the rooms router: the chat.Handler the connectors hand events to.
func (b *Bridge) Router() *rooms.Router { return b.router }

// Approvals is the approvals service.
func (b *Bridge) Approvals() *approvals.Service { return b.appr }

// Delegation is the delegation service (rendezvous, background tasks).
func (b *Bridge) Delegation() *delegation.Service { return b.del }

// Threads returns the threads (their expansion of the outbox's OpExpand
// effects, for tests that read the outbox).
func (b *Bridge) Threads() *threads.Threads { return b.threads }

// Sweeper is the approvals sweeper (tests sweep at a fake clock's time).
func (b *Bridge) Sweeper() *ttl.Sweeper { return b.sweeper }

// Runners is the bridge's side of the runners (agents on other machines).
func (b *Bridge) Runners() *runners.Hub { return b.runners }

// Surfaces are the surfaces the outbox delivers to.
func (b *Bridge) Surfaces() []string { return b.surfaces }

// AgentCount is how many agents the bridge runs.
func (b *Bridge) AgentCount() int { return len(b.opts.Config.Agents) }

// Run does the leader's work whenever this instance leads, until ctx ends:
// single node, at once. In a graceful stop (Stop) the work drains and Run
// returns once ctx ends. An error is a critical failure of leader work.
func (b *Bridge) Run(ctx context.Context) error {
	work := b.met.Leading(func(ctx context.Context) error { return b.stop.lead(ctx, b.work()) })
	lead := func(ctx context.Context) error {
		// The store is brought to this binary's format first of all;
		// /readyz says ready once it is.
		if ok, err := b.migrateStore(ctx); !ok {
			return err
		}
		b.migrated.Store(true)
		defer b.migrated.Store(false)
		return work(ctx)
	}
	if l := b.opts.Leadership; l != nil {
		return l.Lead(ctx, lead)
	}
	return lead(ctx)
}

// work is one term of the leader's work.
func (b *Bridge) work() leaderWork {
	return leaderWork{
		sched: b.sched,
		runSched: func(ctx context.Context) error {
			// The queue counts are counted afresh each term (an older
			// binary may have led without keeping them).
			if err := b.svc.ResetQueueCounts(ctx); err != nil {
				return err
			}
			// Tasks recorded running whose process is not ours end as
			// interrupted (told to their agent) before any turn runs.
			if err := b.del.Recover(ctx); err != nil {
				return err
			}
			// Live messages are shown while turns run (and those left
			// open by an earlier term are closed as interrupted first).
			lctx, stopLive := context.WithCancel(ctx)
			live := make(chan struct{})
			go func() { defer close(live); _ = b.live.Run(lctx) }()
			defer func() { stopLive(); <-live }()
			return b.sched.Run(ctx)
		},
		deliver: b.deliver,
		hold:    b.opts.HoldOutbox,
		intake:  b.intake,
	}
}

// Stop begins a graceful stop: no new work (see Handler), intake stops,
// running turns reach a safe point, the outbox is flushed; all within
// shutdown.grace. Drained tells when that is done.
func (b *Bridge) Stop() {
	if b.web != nil {
		b.web.Close() // the web room's live streams end: the HTTP server's shutdown does not wait for them
	}
	b.stop.begin()
}

// Close ends the agent tools' calls still in flight, and refuses later
// ones: call it once Run has returned, before the HTTP server shuts down
// (its shutdown waits for its handlers, and a call waiting for people, an
// approval or a question, could wait for a day; what it waits for stays in
// the store, and the resumed turn asks again).
func (b *Bridge) Close() { b.tools.Close() }

// Drained is closed once the leader's work has drained after Stop (at once
// on a follower).
func (b *Bridge) Drained() <-chan struct{} { return b.stop.drained() }

// Wait waits for the background work that outlives a term (background
// tasks' processes) to end.
func (b *Bridge) Wait() { b.del.Wait() }

// runtimeFor builds the runtime of agent name from its config.
func runtimeFor(cfg *config.Config, name string, a config.Agent) (agents.Runtime, error) {
	workdir := cfg.AgentWorkdir(name)
	switch k := process.Kind(a.Kind); k {
	case process.Exec, process.Claude, process.Codex:
		return &process.Runtime{Kind: k, Command: a.Command, Workdir: workdir, Home: a.Home, TurnTimeout: a.TurnTimeout, HideEnv: cfg.SecretEnv,
			Stream: true}, nil
	}
	return nil, fmt.Errorf("agents.%s.kind: unknown kind %q (want exec, claude or codex)", name, a.Kind)
}
