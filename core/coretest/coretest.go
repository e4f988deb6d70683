// Package coretest runs a whole bridge, assembled by core.New, inside a
// test: a real bolt file, the HTTP API on a local test server, and the
// leader's work running until the test stops it. The connector tests
// (Slack, Feishu), delegation and approvals tests start their bridge here.
package coretest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// Token is the API token of every test bridge.
const Token = "coretest-api-token"

// Options describe a test bridge.
type Options struct {
	// Config is the YAML configuration; "%DIR%" in it stands for Dir.
	Config string
	// Dir is the data dir (and bolt file's folder): reuse it to restart
	// a bridge on the same store. Required.
	Dir string
	// DB, if set, is the store, kept open across bridges by the test (a
	// restart whose background tasks outlive the bridge that started
	// them); then Stop leaves it open and waits for those tasks only at
	// the end of the test. Unset: the bolt file in Dir, closed by Stop.
	DB *bolt.DB
	// Store, if set, is the store instead of a bolt file (an etcd store of
	// store/etcd/etcdtest), opened and closed by the test; DB stays nil.
	Store store.Store
	// Connectors builds the connectors of one start (nil: none).
	Connectors func() []chat.Connector
	// Log defaults to discarding; Clock to the real one.
	Log   *slog.Logger
	Clock clock.Clock
	// RunnerWatch is core.Options.RunnerWatch.
	RunnerWatch time.Duration
	// Runtimes, Surfaces: as core.Options.
	Runtimes func(name string, a config.Agent) (agents.Runtime, error)
	Surfaces []string
	// HoldOutbox: as core.Options.
	HoldOutbox bool
	// Idle builds the bridge without running the leader's work: effects
	// stay in the outbox, nothing sweeps, no agent runs.
	Idle bool
	// Wrap, if set, wraps the bridge's HTTP handler (a test that breaks
	// the network at a chosen moment of a call).
	Wrap func(http.Handler) http.Handler
}

// Bridge is a running test bridge.
type Bridge struct {
	*core.Bridge
	DB         *bolt.DB
	Config     *config.Config
	Connectors []chat.Connector
	// URL is the base URL of its HTTP API (webhooks, /v1, /mcp).
	URL string

	stop func()
}

// Start assembles a bridge from o and runs it until Stop or the end of t.
func Start(t testing.TB, o Options) *Bridge {
	t.Helper()
	cfg, err := config.Parse([]byte(strings.ReplaceAll(o.Config, "%DIR%", o.Dir)))
	if err != nil {
		t.Fatal(err)
	}
	db, err := o.DB, error(nil)
	var st store.Store = db
	if o.Store != nil {
		st = o.Store
	} else if db == nil {
		if db, err = bolt.Open(filepath.Join(o.Dir, "bridge.db")); err != nil {
			t.Fatal(err)
		}
		st = db
	}
	closeDB := func() {
		if o.DB == nil && o.Store == nil {
			_ = db.Close()
		}
	}
	var conns []chat.Connector
	if o.Connectors != nil {
		conns = o.Connectors()
	}
	web := httptest.NewUnstartedServer(nil)
	ctx, cancel := context.WithCancel(context.Background())
	b, err := core.New(ctx, core.Options{Config: cfg, Store: st, Clock: o.Clock, Log: o.Log, Connectors: conns,
		APIToken: Token, APIAddr: web.Listener.Addr().String(), Runtimes: o.Runtimes, Surfaces: o.Surfaces, HoldOutbox: o.HoldOutbox,
		NoRuntimeMetrics: true, RunnerWatch: o.RunnerWatch})
	if err != nil {
		cancel()
		web.Close()
		closeDB()
		t.Fatal(err)
	}
	h := b.Handler()
	if o.Wrap != nil {
		h = o.Wrap(h)
	}
	web.Config, web.Listener = httpapi.NewServer(h, web.Listener, b.ServerOptions())
	web.Start()
	var wg sync.WaitGroup
	if !o.Idle {
		wg.Go(func() {
			if err := b.Run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("bridge: %v", err)
			}
		})
	}
	tb := &Bridge{Bridge: b, DB: db, Config: cfg, Connectors: conns, URL: b.URL()} // https with http.tls_cert_file
	var once sync.Once
	tb.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			b.Close() // before the server: its Close waits for tool calls
			web.Close()
			if o.DB != nil {
				t.Cleanup(b.Wait) // before the test closes its store
				return
			}
			b.Wait()
			closeDB()
		})
	}
	t.Cleanup(tb.stop)
	return tb
}

// Stop ends the bridge's work, waits for it and for its background tasks,
// and closes its server and store (again: nothing). With Options.DB, the
// tasks are waited for, and the store closed, at the end of the test.
func (b *Bridge) Stop() { b.stop() }

// FillAudit appends n audit records of about size bytes each to st, 50
// to a transaction (an export of many megabytes, quickly).
func FillAudit(t testing.TB, st store.Store, n, size int) {
	t.Helper()
	detail := strings.Repeat("x", size)
	for i := 0; i < n; i += 50 {
		err := st.Update(t.Context(), func(tx store.Tx) error {
			for j := i; j < min(i+50, n); j++ {
				if err := audit.Append(tx, audit.Record{Time: time.Now(), Actor: "coretest", Action: "fill", Detail: detail}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
