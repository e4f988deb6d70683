// Package ttl is the sweeper that expires what waited too long (approvals):
// a github.com/robfig/cron/v3 job that reads only what is due, through the
// store's expiry index, and expires the items in batched transactions
// (bounded to fit every backend's transaction limits). It
// runs only where the leader's work runs: Start it when a term starts, Stop
// it when the term ends.
package ttl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/store"
)

// Expirer is something with an expiry index: approvals (open questions
// among them) and, with a rendezvous timeout, delegation.
type Expirer interface {
	// Due returns up to limit timers due at now that come after after (the
	// zero Timer: from the first), earliest first, reading the due range of
	// the expiry index only.
	Due(ctx context.Context, now time.Time, after store.Timer, limit int) ([]store.Timer, error)
	// Expire expires the item of t if it is still waiting and due at now,
	// in one transaction, and reports whether it did; an item settled
	// meanwhile is not expired (and its timer is dropped).
	Expire(ctx context.Context, t store.Timer, now time.Time) (bool, error)
}

// BatchExpirer is an Expirer that can expire several items in one
// transaction (approvals): the sweeper hands it batches of at most
// MaxBatch timers (fewer if Options.Batch says so), and expires the items
// of a failed batch one by one, so that one bad item never holds back the
// others.
type BatchExpirer interface {
	Expirer
	// ExpireBatch does what Expire does for each timer of ts, all in one
	// transaction: expired[i] tells whether ts[i] was expired.
	ExpireBatch(ctx context.Context, ts []store.Timer, now time.Time) (expired []bool, err error)
	// MaxBatch is how many timers one ExpireBatch takes at most: what one
	// transaction of the expirer's store holds (etcd bounds a Txn's
	// writes; bolt does not, but a batch is one call of its group commit).
	MaxBatch() int
}

// Defaults of Options.
const (
	// DefaultPage is how many due timers one range read returns.
	DefaultPage = 1024
	// DefaultParallel is how many batches (or single expiries) are in
	// flight at once: enough for the store to group-commit them (bolt
	// shares one fsync between up to 256 concurrent updates; etcd packs
	// them into few Txns).
	DefaultParallel = 256
)

// Options configure a Sweeper.
type Options struct {
	// Spec is the cron schedule (config approvals.sweep; default
	// config.DefaultSweep, "@every 1m").
	Spec string
	// Clock tells the time the sweeps compare due times with.
	Clock clock.Clock
	// Log defaults to discarding.
	Log *slog.Logger
	// Page and Parallel tune a sweep (defaults DefaultPage and
	// DefaultParallel); Parallel counts batches in flight. Batch, if set,
	// bounds a BatchExpirer's batches below its MaxBatch.
	Page, Parallel, Batch int
	// OnSweep, if set, is told what each sweep did (metrics).
	OnSweep func(Result)
	// Notices are swept after the expirers, the same way, but their items
	// are not expired: their timers are notices (an approval card's time
	// left, reminders), counted in Result.Notices only.
	Notices []Expirer
}

// Result is what one sweep did.
type Result struct {
	// Due is how many due timers the sweep read.
	Due int
	// Expired is how many items it expired.
	Expired int
	// Skipped is how many were settled meanwhile (their timers dropped).
	Skipped int
	// Failed is how many could not be expired (retried next sweep).
	Failed int
	// Notices is how many notices (Options.Notices) were sent.
	Notices int
	// Took is how long the sweep took.
	Took time.Duration
}

// Sweeper expires due items on a cron schedule.
type Sweeper struct {
	o        Options
	sched    cron.Schedule
	expirers []Expirer
	log      *slog.Logger

	mu   sync.Mutex
	term *term // nil when not running
}

// New returns a Sweeper over expirers. A bad schedule is an error naming the
// config key.
func New(o Options, expirers ...Expirer) (*Sweeper, error) {
	if o.Spec == "" {
		o.Spec = config.DefaultSweep
	}
	sched, err := cron.ParseStandard(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("config: approvals.sweep: %q: %w", o.Spec, err)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Page <= 0 {
		o.Page = DefaultPage
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	return &Sweeper{o: o, sched: sched, expirers: expirers, log: o.Log}, nil
}

// ErrRunning: Start was called while the sweeper runs.
var ErrRunning = errors.New("ttl: the sweeper is running already")

// Start sweeps once at once (what fell due while no leader swept), then on
// the schedule, until ctx ends or Stop is called. Each run is wrapped in
// cron.SkipIfStillRunning (a slow sweep is never run twice at once) and,
// inside it, cron.Recover (a panic is logged, the next run happens). Start
// returns at once.
func (s *Sweeper) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != nil {
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	logger := cronLogger{s.log}
	// Recover goes inside SkipIfStillRunning: in cron v3.0.1 a panic that
	// unwinds through SkipIfStillRunning never gives its token back, and
	// every later run would be skipped (the order in notes/ha.md,
	// Recover outside, has that bug; TestStartRecoversPanicsAndStops).
	job := cron.NewChain(cron.SkipIfStillRunning(logger), cron.Recover(logger)).Then(cron.FuncJob(func() {
		if ctx.Err() != nil {
			return
		}
		res, err := s.SweepOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.ErrorContext(ctx, "sweep failed", "error", err, "expired", res.Expired, "failed", res.Failed)
		case res.Due > 0:
			s.log.InfoContext(ctx, "sweep", "expired", res.Expired, "skipped", res.Skipped, "failed", res.Failed, "took", res.Took)
		}
	}))
	c := cron.New(cron.WithLogger(logger))
	c.Schedule(s.sched, job)
	t := &term{cancel: cancel, done: make(chan struct{})}
	s.term = t
	var first sync.WaitGroup
	first.Add(1)
	go func() {
		defer first.Done()
		job.Run() // through the same chain: a scheduled run that overlaps is skipped
	}()
	c.Start()
	go func() {
		<-ctx.Done()
		<-c.Stop().Done() // waits for a scheduled run in progress
		first.Wait()
		s.mu.Lock()
		if s.term == t {
			s.term = nil
		}
		s.mu.Unlock()
		close(t.done)
	}()
	return nil
}

// Run is Start, then Stop once ctx ends: the sweeper as one job of the
// leader's work.
func (s *Sweeper) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	s.Stop()
	return nil
}

// term is one Start..Stop of the sweeper.
type term struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once every run of the term has returned
}

// Stop ends the schedule, cancels a running sweep and waits for it to
// return. It is a no-op when the sweeper is not running.
func (s *Sweeper) Stop() {
	s.mu.Lock()
	t := s.term
	s.mu.Unlock()
	if t != nil {
		t.cancel()
		<-t.done
	}
}

// SweepOnce expires everything due now, page by page, with up to Parallel
// expiries in flight. Items that fail are logged, counted and left for the
// next sweep; the first error is returned with the counts.
func (s *Sweeper) SweepOnce(ctx context.Context) (Result, error) {
	start := time.Now()
	now := s.o.Clock.Now()
	var res Result
	var firstErr error
	for _, e := range s.expirers {
		if err := s.sweep(ctx, e, now, &res); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for _, e := range s.o.Notices {
		var n Result
		if err := s.sweep(ctx, e, now, &n); err != nil && firstErr == nil {
			firstErr = err
		}
		res.Notices += n.Expired
	}
	res.Took = time.Since(start)
	if s.o.OnSweep != nil {
		s.o.OnSweep(res)
	}
	return res, firstErr
}

func (s *Sweeper) sweep(ctx context.Context, e Expirer, now time.Time, res *Result) error {
	// A fenced write means this instance lost leadership: stop at once.
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var firstErr error
	var mu sync.Mutex
	note := func(t store.Timer, ok bool, err error) { // with mu held
		switch {
		case err != nil:
			res.Failed++
			if firstErr == nil {
				firstErr = err
			}
			if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrUnavailable) { // the rest would fail too
				cancel()
			}
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "expiring", "timer", t.ID, "error", err)
			}
		case ok:
			res.Expired++
		default:
			res.Skipped++
		}
	}
	// The pages are read one after the other, each from the timer that
	// ends the one before (each timer is tried once), while the pages
	// before are being expired: the store's writer is never left waiting
	// for a page's last commit before the next page is read and prepared.
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, s.o.Parallel)
	var after store.Timer
	seen := map[string]bool{}
	for ctx.Err() == nil {
		due, err := e.Due(ctx, now, after, s.o.Page)
		if err != nil {
			wg.Wait()
			return err
		}
		if len(due) == 0 {
			break
		}
		after = due[len(due)-1]
		// An item whose timer moved on to a later time still due (a
		// notice's next one) is found again: tried once a sweep all the same.
		todo := due[:0:0]
		for _, t := range due {
			if !seen[t.ID] {
				seen[t.ID] = true
				todo = append(todo, t)
			}
		}
		mu.Lock()
		res.Due += len(todo)
		mu.Unlock()
		for _, b := range s.batches(e, todo) {
			sem <- struct{}{}
			if ctx.Err() != nil {
				<-sem
				break
			}
			wg.Go(func() {
				defer func() { <-sem }()
				s.expire(ctx, e, b, now, &mu, note)
			})
		}
		if len(due) < s.o.Page {
			break
		}
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = parent.Err()
	}
	return firstErr
}

// batches cuts todo into the units the sweep expires: batches of at most
// MaxBatch (and Options.Batch) for a BatchExpirer, single timers otherwise.
func (s *Sweeper) batches(e Expirer, todo []store.Timer) [][]store.Timer {
	n := 1
	if be, ok := e.(BatchExpirer); ok {
		n = max(1, be.MaxBatch())
		if s.o.Batch > 0 {
			n = min(n, s.o.Batch)
		}
	}
	var out [][]store.Timer
	for len(todo) > 0 {
		k := min(n, len(todo))
		out = append(out, todo[:k:k])
		todo = todo[k:]
	}
	return out
}

// expire expires one unit of the sweep and tells note (under mu) the outcome
// of each timer. A batch that fails (but not because this instance lost
// leadership or the sweep ended) is retried one timer at a time.
func (s *Sweeper) expire(ctx context.Context, e Expirer, b []store.Timer, now time.Time, mu *sync.Mutex, note func(store.Timer, bool, error)) {
	if be, ok := e.(BatchExpirer); ok && len(b) > 1 {
		expired, err := be.ExpireBatch(ctx, b, now)
		if err == nil || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			mu.Lock()
			defer mu.Unlock()
			for i, t := range b {
				note(t, err == nil && expired[i], err)
			}
			return
		}
		s.log.DebugContext(ctx, "expiring a batch failed: expiring its items one by one", "timers", len(b), "error", err)
	}
	for _, t := range b {
		ok, err := e.Expire(ctx, t, now)
		mu.Lock()
		note(t, ok, err)
		mu.Unlock()
	}
}

// cronLogger sends cron's logging to slog: its routine messages at debug.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append([]any{"error", err}, kv...)...)
}
