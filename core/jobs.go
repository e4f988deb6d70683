package core

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/store"
)

// pruneEvery is how often the leader deletes what is past retention (expired
// dedupe keys, old audit records): retention is counted in hours and days,
// so hourly keeps the store bounded without a noticeable load.
const pruneEvery = time.Hour

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

// expiry is one more kind of record retention deletes once expired: what
// it is (for the logs) and the function that deletes those expired by now.
type expiry struct {
	what  string
	purge func(ctx context.Context, now time.Time) (int, error)
}

// retention keeps the store bounded, now and then every pruneEvery until ctx
// ends: it deletes expired inbound-event dedupe keys, what the expiries
// delete (the web room's sign-in links and sessions) and, when auditFor > 0,
// audit records older than auditFor. A failed round is logged and retried
// next round: retention is not urgent.
func retention(ctx context.Context, s store.Store, clk clock.Clock, auditFor time.Duration, log *slog.Logger, more ...expiry) error {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	all := append([]expiry{{"dedupe keys", func(ctx context.Context, now time.Time) (int, error) {
		return purgeDedupe(ctx, s, now)
	}}}, more...)
	for {
		for _, e := range all {
			if n, err := e.purge(ctx, clk.Now()); err != nil && ctx.Err() == nil {
				log.WarnContext(ctx, "retention: purging expired records failed", "what", e.what, "error", err)
			} else if n > 0 {
				log.InfoContext(ctx, "retention: purged expired records", "what", e.what, "records", n)
			}
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

// purgeDedupe deletes the dedupe keys expired by now, reading them in
// order, a transaction for each purgeBatch deleted (store.PurgeDedupe).
func purgeDedupe(ctx context.Context, s store.Store, now time.Time) (int, error) {
	total, after := 0, ""
	for {
		var n int
		var next string
		err := s.Update(ctx, func(tx store.Tx) error {
			var err error
			n, next, err = store.PurgeDedupe(tx, now, after, purgeBatch)
			return err
		})
		if err != nil {
			return total, err
		}
		total, after = total+n, next
		if next == "" {
			return total, nil
		}
	}
}
