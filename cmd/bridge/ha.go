package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/threads"
)

// pruneEvery is how often the leader deletes what is past retention (expired
// dedupe keys, old audit records): retention is counted in hours and days,
// so hourly keeps the store bounded without a noticeable load.
const pruneEvery = time.Hour

// backend is where a bridge keeps its state and how it decides to do the
// leader's work: the bolt file of a single node, or etcd with an election.
type backend struct {
	store store.Store
	// lead runs work while this instance leads (single node: at once, until
	// ctx ends) and returns when ctx ends or work fails.
	lead func(ctx context.Context, work func(context.Context) error) error
	// ready answers /readyz (nil: always ready).
	ready func() bool
	// jobs are leader jobs of the backend itself (retention).
	jobs []job
	// outbound wraps the connectors the outbox sends through (HA: each
	// send is preceded by a fenced claim, threads.Fenced).
	outbound func([]chat.Connector) []chat.Connector
	close    func()
	desc     string
}

// openBackend opens the store of cfg. Single node: bolt in data_dir, whose
// file lock makes a second bridge on the same data_dir fail at once. HA
// (cfg.HA set): the etcd store, fenced by this instance's leadership.
func openBackend(cfg *config.Config, clk clock.Clock, log *slog.Logger) (*backend, error) {
	if cfg.HA == nil {
		db, err := bolt.Open(filepath.Join(cfg.DataDir, "bridge.db"))
		if err != nil {
			return nil, err
		}
		return &backend{
			store: db,
			lead:  func(ctx context.Context, work func(context.Context) error) error { return work(ctx) },
			jobs: []job{{"retention", func(ctx context.Context) error {
				return retention(ctx, db, clk, 0, log)
			}}},
			outbound: func(c []chat.Connector) []chat.Connector { return c },
			close:    func() { _ = db.Close() },
			desc:     "bolt " + db.Path(),
		}, nil
	}
	cli, err := etcd.NewClient(cfg.HA.Etcd)
	if err != nil {
		return nil, fmt.Errorf("ha.etcd: %w", err)
	}
	host, _ := os.Hostname()
	l, err := election.New(election.Options{
		Client: cli, Prefix: cfg.HA.Prefix + "/leader", TTL: cfg.HA.LeaseTTL,
		Name: fmt.Sprintf("%s/%d", host, os.Getpid()), Log: log,
	})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	st, err := etcd.New(cli, etcd.Options{Prefix: cfg.HA.Prefix + "/store", Fence: l, Log: log})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	auditFor := cfg.HA.AuditRetention
	return &backend{
		store: st,
		lead:  l.Run,
		ready: l.Leading,
		jobs: []job{{"retention", func(ctx context.Context) error {
			return retention(ctx, st, clk, auditFor, log)
		}}},
		outbound: func(conns []chat.Connector) []chat.Connector {
			out := make([]chat.Connector, len(conns))
			for i, c := range conns {
				out[i] = threads.Fenced(c, claimLeadership(st))
			}
			return out
		},
		close: func() {
			_ = st.Close()
			_ = cli.Close()
		},
		desc: fmt.Sprintf("etcd %v prefix %s", cfg.HA.Etcd, cfg.HA.Prefix),
	}, nil
}

// job is one piece of leader work.
type job struct {
	name string
	run  func(context.Context) error
}

// runJobs runs jobs until ctx ends or one of them fails; then it cancels the
// others, waits for all of them, and returns the first failure.
func runJobs(ctx context.Context, jobs []job) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.run(ctx); err != nil && ctx.Err() == nil {
				once.Do(func() { first = fmt.Errorf("%s: %w", j.name, err) })
				cancel()
			}
		}()
	}
	wg.Wait()
	return first
}

// purgeBatch is how many expired dedupe keys one transaction deletes (two
// deletes each, under etcd's 128 operations per transaction).
const purgeBatch = 50

// retention keeps the store bounded, now and then every pruneEvery until ctx
// ends: it deletes expired inbound-event dedupe keys and, when auditFor > 0,
// audit records older than auditFor. A failed round is logged and retried
// next round: retention is not urgent.
func retention(ctx context.Context, s store.Store, clk clock.Clock, auditFor time.Duration, log *slog.Logger) error {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		if n, err := purgeDedupe(ctx, s, clk.Now()); err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "retention: purging dedupe keys failed", "error", err)
		} else if n > 0 {
			log.InfoContext(ctx, "retention: purged expired dedupe keys", "keys", n)
		}
		if auditFor > 0 {
			n, err := audit.Prune(ctx, s, clk.Now().Add(-auditFor))
			if err != nil && ctx.Err() == nil {
				log.WarnContext(ctx, "retention: pruning audit records failed", "error", err)
			} else if n > 0 {
				log.InfoContext(ctx, "retention: pruned audit records", "records", n, "retention", auditFor)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// purgeDedupe deletes the dedupe keys expired by now, purgeBatch per
// transaction.
func purgeDedupe(ctx context.Context, s store.Store, now time.Time) (int, error) {
	total := 0
	for {
		var n int
		err := s.Update(ctx, func(tx store.Tx) error {
			var err error
			n, err = store.PurgeDedupe(tx, now, purgeBatch)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < purgeBatch {
			return total, nil
		}
	}
}

// claimLeadership is the claim of a fenced connector (threads.Fenced): an
// empty Update of the fenced etcd store, which fails once this instance no
// longer leads.
func claimLeadership(s store.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		return s.Update(ctx, func(store.Tx) error { return nil })
	}
}
