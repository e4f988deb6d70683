package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/delegation/mcptools"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/metrics"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
)

// addrFile, in the data dir, holds the address the API listens on, so the CLI
// finds a daemon started on port 0.
const addrFile = "http.addr"

// httpGrace bounds how long in-flight HTTP calls may take once the leader's
// work has stopped (the graceful stop itself is shutdown.grace).
const httpGrace = 5 * time.Second

func runCmd(ctx context.Context, args []string) error {
	fs := newFlags("run")
	path := fs.String("config", "", "config file (default: console room, embedded store, demo agents)")
	level := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	format := fs.String("log-format", "", "text or json (overrides log.format)")
	httpAddr := fs.String("http", "", "listen address of the API (overrides http.addr; port 0 picks a free port)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if *level != "" {
		cfg.Log.Level = *level
	}
	if *format != "" {
		if err := config.CheckLogFormat(*format); err != nil {
			return fmt.Errorf("%w: run: --log-format: %v", errUsage, err)
		}
		cfg.Log.Format = *format
	}
	if *httpAddr != "" {
		cfg.HTTP.Addr = *httpAddr
	}
	return daemon(ctx, cfg)
}

// newLogger logs to stderr at level, as text (key=value) or json (log.format).
func newLogger(level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(strings.ToUpper(orDefault(level, "info"))))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// daemon runs the bridge until ctx ends, then stops gracefully within
// shutdown.grace (see stopping).
func daemon(ctx context.Context, cfg *config.Config) error {
	log := newLogger(cfg.Log.Level, cfg.Log.Format)
	// Libraries that log through slog's default (or the log package) log
	// through ours, in its format.
	slog.SetDefault(log)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	token, err := apiToken(cfg, log)
	if err != nil {
		return err
	}
	clk := clock.Real{}
	be, err := openBackend(cfg, clk, log)
	if err != nil {
		return err
	}
	defer be.close()
	db := be.store
	svc := requests.NewService(db, clk, cfg.Owner, cfg.Owners)

	conns, err := connectorsFor(cfg, log)
	if err != nil {
		return err
	}
	var surfaces []string
	for _, c := range conns {
		surfaces = append(surfaces, c.Surface())
	}
	// Metrics (GET /metrics): the observer keeps the store's request counts
	// in each change's transaction; the hooks set below report the rest.
	met, err := metrics.New(ctx, metrics.Options{Requests: svc, Agents: sorted(mapKeys(cfg.Agents)), Surfaces: surfaces, Log: log})
	if err != nil {
		return err
	}
	svc.Observe(met.Observe)
	reportAPIErrors(conns, met.APIErrors)
	dir := directory.New(cfg.Rooms, cfg.Owners, surfaces...)
	th := threads.New(dir)
	th.SetRequests(svc) // a delegated request's title names the agent that asked
	svc.Observe(th.Observe)
	// After the threads observer: an approval card is a reply in the thread
	// that the threads observer starts.
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: dir, TTL: cfg.Approvals.TTL,
		Threads: th, Log: log})
	svc.Observe(appr.Observe)
	caps := map[string]int{}
	for name, a := range cfg.Agents {
		caps[name] = a.MaxBackgroundTasks
	}
	// Delegation (ask_agent, background tasks): its observer closes a
	// rendezvous and answers the asker in the transaction that ends the
	// delegated request.
	del := delegation.New(delegation.Options{Requests: svc, Agents: sorted(mapKeys(cfg.Agents)), MaxTasks: caps,
		RendezvousTimeout: cfg.Delegation.RendezvousTimeout,
		Workdir:           cfg.DataDir, Threads: th, Log: log})
	svc.Observe(del.Observe)
	router := rooms.New(svc, appr, dir, del, log) // del: the "tasks" and "dismiss" commands
	router.OnInbound = met.Inbound
	// The sweeper expires approvals and times out rendezvous (if
	// delegation has a rendezvous timeout).
	sweeper, err := ttl.New(ttl.Options{Spec: cfg.Approvals.Sweep, Clock: clk, Log: log, OnSweep: met.Sweep}, appr, del)
	if err != nil {
		return err
	}

	var ags []agents.Agent
	for _, name := range sorted(mapKeys(cfg.Agents)) {
		a := cfg.Agents[name]
		rt, err := runtimeFor(cfg, name, a)
		if err != nil {
			return err
		}
		ags = append(ags, agents.Agent{Name: name, Runtime: rt})
	}
	sched := agents.NewScheduler(svc, th, log, ags...)
	sched.Approver = appr // agents' request_approval during a run
	sched.Delegator = del
	sched.OnTurn = met.Turn
	deliver := threads.NewDeliverer(db, clk, log, be.outbound(conns)...)
	deliver.OnDelivered = met.Delivered

	api := httpapi.New(httpapi.Options{Service: svc, Router: router, Token: token, Log: log, Ready: be.ready, Tasks: del,
		Registry: met.Registry()})
	// Agent tools over MCP, each call bound by its per-turn token to one
	// request: the scheduler issues a token for each turn (sched.Tools) and
	// hands it to the agent with the URL (set below, once the address is
	// known); each call goes through the scheduler's dispatcher, as the exec
	// protocol's calls do.
	sched.Tasks = mcptools.Tasks{Requests: svc, Delegation: del} // task_status
	tools := mcptools.New(mcptools.Options{Requests: svc, Calls: sched, Log: log})
	sched.Tools = tools
	api.Mount("/mcp", tools)
	for _, c := range conns {
		if w, ok := c.(webhooks); ok {
			for pattern, h := range w.Routes(router) {
				api.Mount(pattern, h)
			}
		}
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("http.addr: %w", err)
	}
	addr := ln.Addr().String()
	sched.MCPURL = mcptools.URL(addr)
	if err := os.WriteFile(filepath.Join(cfg.DataDir, addrFile), []byte(addr+"\n"), 0o600); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	stop := newStopping(cfg.Shutdown.Grace, log)
	srv := &http.Server{Handler: stop.gate(api), ReadHeaderTimeout: 10 * time.Second}
	log.Info("bridge started", "api", "http://"+addr, "data_dir", cfg.DataDir, "store", be.desc, "agents", len(ags), "surfaces", strings.Join(surfaces, ","))

	// The first signal ends signalled and begins a graceful stop; the work
	// goes on, under its own context, until that stop is done.
	signalled := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	// The leader's work: only the leader runs the scheduler (and so the agent
	// processes), the outbox, the approvals sweeper and the platform
	// connections. In HA mode it stops at once when this instance stops
	// leading.
	runScheduler := func(ctx context.Context) error {
		// Tasks recorded running whose process is not ours end as
		// interrupted (told to their agent) before any turn runs.
		if err := del.Recover(ctx); err != nil {
			return err
		}
		return sched.Run(ctx)
	}
	work := leaderWork{sched: sched, runSched: runScheduler, deliver: deliver, intake: []job{{"sweeper", sweeper.Run}}}
	for _, c := range conns {
		work.intake = append(work.intake, job{c.Surface(), func(ctx context.Context) error { return c.Run(ctx, router) }})
	}
	work.intake = append(work.intake, be.jobs...)
	start("leader", func(ctx context.Context) error {
		return be.lead(ctx, met.Leading(func(ctx context.Context) error { return stop.lead(ctx, work) }))
	})
	start("http", func(ctx context.Context) error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	var runErr error
	select {
	case <-signalled.Done():
		log.Info("stopping gracefully: no new work; running turns stop at their next safe point, then the outbox is flushed (a second signal exits at once)",
			"grace", cfg.Shutdown.Grace)
		stop.begin()
		select {
		case <-stop.drained():
		case runErr = <-errs:
		}
	case runErr = <-errs:
	}
	if runErr != nil {
		log.Error("critical job failed; stopping", "error", runErr)
	}
	// Ends the term: HA resigns (a follower leads at once); the store and
	// its lock close when daemon returns.
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), httpGrace)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	log.Info("bridge stopped")
	return runErr
}

func runtimeFor(cfg *config.Config, name string, a config.Agent) (agents.Runtime, error) {
	workdir := a.Workdir
	if workdir == "" {
		workdir = filepath.Join(cfg.DataDir, "work", name)
	}
	switch a.Kind {
	case "exec":
		return &agents.Exec{Command: a.Command, Workdir: workdir, TurnTimeout: a.TurnTimeout, HideEnv: cfg.SecretEnv}, nil
	case "claude":
		return &agents.Claude{Command: a.Command, Workdir: workdir, TurnTimeout: a.TurnTimeout, HideEnv: cfg.SecretEnv}, nil
	case "codex":
		return &agents.Codex{Command: a.Command, Workdir: workdir, TurnTimeout: a.TurnTimeout, HideEnv: cfg.SecretEnv}, nil
	}
	return nil, fmt.Errorf("agents.%s.kind: unknown kind %q (want exec, claude or codex)", name, a.Kind)
}

// apiToken reads the API token, creating a random one (mode 0600) when the
// token file does not exist yet.
func apiToken(cfg *config.Config, log *slog.Logger) (string, error) {
	if cfg.HTTP.APIToken != "" {
		return cfg.HTTP.APIToken, nil
	}
	tok, err := config.Secret("http.api_token", "", cfg.HTTP.APITokenFile)
	if err == nil && tok != "" {
		return tok, nil
	}
	if _, statErr := os.Stat(cfg.HTTP.APITokenFile); !errors.Is(statErr, fs.ErrNotExist) {
		if err == nil {
			err = errors.New("the file is empty")
		}
		return "", fmt.Errorf("http.api_token_file: %w", err)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok = hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(cfg.HTTP.APITokenFile), 0o700); err != nil {
		return "", fmt.Errorf("http.api_token_file: %w", err)
	}
	if err := os.WriteFile(cfg.HTTP.APITokenFile, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("http.api_token_file: %w", err)
	}
	log.Info("created a new API token", "file", cfg.HTTP.APITokenFile)
	return tok, nil
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
