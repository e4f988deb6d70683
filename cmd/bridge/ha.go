package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/core"
	"github.com/roombridge/roombridge/election"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/migrate"
)

// backend is where a bridge keeps its state and how it decides to do the
// leader's work: the bolt file of a single node, or etcd with an election.
type backend struct {
	store store.Store
	// leadership is the election (nil: a single node leads from the start).
	leadership core.Leadership
	// auditFor is how long audit records are kept (0: for ever).
	auditFor time.Duration
	close    func()
	desc     string
	// name is this instance's name in the election ("": single node).
	name string
	// advertise, in HA, sets the election's value: this instance, with
	// the URL runners reach it at (core.Instance's JSON).
	advertise func(value string)
}

// openBackend opens the store of cfg. Single node: bolt in data_dir, whose
// file lock makes a second bridge on the same data_dir fail at once. HA
// (cfg.HA set): the etcd store, fenced by this instance's leadership.
func openBackend(cfg *config.Config, log *slog.Logger) (*backend, error) {
	if cfg.HA == nil {
		db, err := bolt.Open(filepath.Join(cfg.DataDir, "bridge.db"))
		if err != nil {
			return nil, err
		}
		// A store newer than this binary is refused before anything
		// serves it; a new one is stamped and an older one migrated
		// (this process alone holds the file).
		if _, err := migrate.Run(context.Background(), db, core.MigrateOptions(log)); err != nil {
			_ = db.Close()
			return nil, err
		}
		return &backend{store: db, close: func() { _ = db.Close() }, desc: "bolt " + db.Path()}, nil
	}
	cli, err := etcd.NewClient(cfg.HA.Etcd, etcd.ClientOptions{KeepAlive: cfg.HA.KeepAlive, Log: log})
	if err != nil {
		return nil, fmt.Errorf("ha.etcd: %w", err)
	}
	host, _ := os.Hostname()
	name := fmt.Sprintf("%s/%d", host, os.Getpid())
	var st *etcd.Store
	l, err := election.New(election.Options{
		Client: cli, Prefix: cfg.HA.Prefix + "/leader", TTL: cfg.HA.LeaseTTL,
		Name: name, Value: core.Self(name).JSON(), Log: log,
		// A binary older than the store's format never leads it.
		Eligible: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, max(cfg.HA.LeaseTTL, time.Second))
			defer cancel()
			_, err := migrate.Check(ctx, st, core.KnownFormat())
			if fe := (*store.FormatError)(nil); errors.As(err, &fe) || errors.Is(err, store.ErrRestoring) {
				return err
			}
			return nil // etcd out of reach: the campaign finds out
		},
	})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	st, err = etcd.New(cli, etcd.Options{Prefix: cfg.HA.Prefix + "/store", Fence: l, Log: log})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &backend{
		store:      st,
		leadership: elected{l, st, cfg.HA.LeaseTTL / 3},
		auditFor:   cfg.HA.AuditRetention,
		close: func() {
			_ = st.Close()
			_ = cli.Close()
		},
		desc:      fmt.Sprintf("etcd %v prefix %s", cfg.HA.Etcd, cfg.HA.Prefix),
		name:      name,
		advertise: l.SetValue,
	}, nil
}

// elected is the etcd election as the core's Leadership. Its claim is an
// empty Update of the fenced etcd store, which fails once this instance no
// longer leads: a deposed leader (paused, partitioned) thus posts nothing
// after etcd ended its term.
type elected struct {
	*election.Leadership
	store store.Store
	// fresh bounds how long a claim may take, from the request to the use
	// of its answer: a third of the lease's TTL, the keep-alive period.
	fresh time.Duration
}

func (e elected) Lead(ctx context.Context, work func(context.Context) error) error {
	return e.Run(ctx, work)
}

// claimTries bounds the claims made in a row when each came back late.
const claimTries = 3

// Claim makes sure this instance leads, just before a post. etcd's answer
// tells how things were when etcd gave it: an answer used much later (the
// process was paused, SIGSTOP or a laptop's sleep, while it waited in a
// socket or before the post) may be a term that has ended since, and a new
// leader is posting. So a claim whose round trip took longer than fresh is
// made again. Real time, not the bridge's clock: it measures this
// process's own pause, on the monotonic clock (which counts a SIGSTOP) and
// the wall clock (which counts a machine's sleep), whichever says longer.
// A send that has passed its claim may still land late: the claim cannot
// be one with the platform's call.
func (e elected) Claim(ctx context.Context) error {
	for range claimTries {
		start := time.Now()
		if err := e.store.Update(ctx, func(store.Tx) error { return nil }); err != nil {
			return err
		}
		end := time.Now()
		if e.fresh <= 0 || max(end.Sub(start), end.Round(0).Sub(start.Round(0))) < e.fresh {
			return nil
		}
	}
	return fmt.Errorf("ha: claim: etcd's answers came back later than %v %d times in a row (the process paused, or etcd overloaded): %w", e.fresh, claimTries, store.ErrUnavailable)
}

// advertiseURL is where runners reach this instance: ha.advertise_url, or
// the API's scheme and listening address, with the host name for an
// unspecified host (":7070", "0.0.0.0:7070").
func advertiseURL(cfg *config.Config, addr net.Addr) string {
	if cfg.HA != nil && cfg.HA.AdvertiseURL != "" {
		return cfg.HA.AdvertiseURL
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return cfg.HTTP.Scheme() + "://" + addr.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return cfg.HTTP.Scheme() + "://" + net.JoinHostPort(host, port)
}
