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
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core"
	"github.com/roombridge/roombridge/httpapi"
)

// addrFile, in the data dir, holds the address the API listens on, so the CLI
// finds a daemon started on port 0.
const addrFile = "http.addr"

// httpGrace bounds how long in-flight HTTP calls may take once the leader's
// work has stopped (the graceful stop itself is shutdown.grace).
const httpGrace = 5 * time.Second

// runOptions are the flags of `run`.
type runOptions struct {
	config, http, logLevel, logFormat string
}

// runDaemon is `run`: the daemon with the config of o and its overrides.
func runDaemon(ctx context.Context, o runOptions) error {
	cfg, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	if o.logLevel != "" {
		cfg.Log.Level = o.logLevel
	}
	if o.logFormat != "" {
		if err := config.CheckLogFormat(o.logFormat); err != nil {
			return fmt.Errorf("%w: run: --log-format: %v", errUsage, err)
		}
		cfg.Log.Format = o.logFormat
	}
	if o.http != "" {
		cfg.HTTP.Addr = o.http
	}
	return daemon(ctx, cfg)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// daemon runs the bridge until ctx ends, then stops gracefully within
// shutdown.grace (core.Bridge.Stop). It makes nothing (data_dir, api.token,
// the store) before its checks and its listen succeed: a start refused
// leaves nothing half-made.
func daemon(ctx context.Context, cfg *config.Config) error {
	ln, portErr, err := preflight(cfg)
	if err != nil {
		return err
	}
	if portErr != nil {
		return portErr
	}
	defer ln.Close()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	log, closeLog, err := openLog(cfg, os.Stderr, isTerminal(os.Stderr))
	if err != nil {
		return err
	}
	defer closeLog()
	// Libraries that log through slog's default (or the log package) log
	// through ours, in its format.
	slog.SetDefault(log)
	token, err := apiToken(cfg, log)
	if err != nil {
		return err
	}
	be, err := openBackend(cfg, log)
	if err != nil {
		return err
	}
	defer be.close()
	conns, err := connectorsFor(cfg, log)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	inst := core.Self(be.name)
	if be.advertise != nil {
		inst.URL = advertiseURL(cfg, ln.Addr())
		be.advertise(inst.JSON())
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, addrFile), []byte(addr+"\n"), 0o600); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	// The work goes on under its own context until the graceful stop that
	// the first signal begins is done.
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	b, err := core.New(work, core.Options{Config: cfg, Store: be.store, Log: log, Connectors: conns,
		APIToken: token, APIAddr: addr, Leadership: be.leadership, AuditRetention: be.auditFor, Instance: inst})
	if err != nil {
		return err
	}
	log.Info("bridge started", "api", b.URL(), "config", configSource(cfg), "data_dir", cfg.DataDir, "store", be.desc, "version", core.Version(), "format", core.KnownFormat(),
		"agents", b.AgentCount(), "surfaces", strings.Join(b.Surfaces(), ","))
	if w := b.Web(); w != nil {
		log.Info("web room", "url", w.URL())
		fmt.Fprintf(os.Stderr, "web room: %s (type web in a room for a sign-in link)\n", w.URL())
	}
	return serve(ctx, work, cancel, ln, b, cfg.Shutdown.Grace, log)
}

// serve runs b's HTTP API on ln and its leader work until the first signal
// (ctx) or a critical failure; then it stops b gracefully, ends the term
// (HA resigns: a follower leads at once) and shuts the HTTP server down.
func serve(ctx, work context.Context, cancel context.CancelFunc, ln net.Listener, b *core.Bridge, grace time.Duration, log *slog.Logger) error {
	srv, ln := httpapi.NewServer(b.Handler(), ln, b.ServerOptions())
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.Run(work); err != nil && work.Err() == nil {
			errs <- fmt.Errorf("leader: %w", err)
		}
	})
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http: %w", err)
		}
	})
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping gracefully: no new work; running turns stop at their next safe point, then the outbox is flushed (a second signal exits at once)",
			"grace", grace)
		b.Stop()
		select {
		case <-b.Drained():
		case runErr = <-errs:
		}
	case runErr = <-errs:
	}
	if runErr != nil {
		log.Error("critical job failed; stopping", "error", runErr)
	}
	cancel()
	b.Close() // tool calls still waiting for people end: Shutdown waits for its handlers
	sctx, scancel := context.WithTimeout(context.Background(), httpGrace)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	log.Info("bridge stopped")
	return runErr
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
