// Package election keeps one bridge instance active: it campaigns in an etcd
// election (client/v3/concurrency) and runs the leader's work only while this
// instance leads, and it is the fence of the etcd store (store/etcd.Fence).
//
// A term starts when Campaign returns and the leader key is re-read and found
// to be this session's, with the CreateRevision the election reports (a
// Campaign can return "leader" after its own session expired: the phantom
// leader of notes/ha.md). A term ends, and the leader's work is cancelled at
// once, when the session ends (lease expired or revoked, etcd unreachable
// for a TTL), when a fenced write is refused (Lost), or at shutdown. The
// next campaign starts only after the work has returned.
//
// Single-node mode needs no election: the bolt store takes an exclusive lock
// on its file (store/bolt.Open fails within a second with "in use by another
// process"), so two bridges on one data dir cannot both run.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// retryDelay is the pause before a new session or campaign after an error
// (etcd unreachable): short against the lease TTL, long enough not to spin.
const retryDelay = 500 * time.Millisecond

// releaseTimeout bounds the resign and lease revoke at the end of a term: a
// revoke is what makes a graceful handover take milliseconds instead of a
// TTL, but an unreachable etcd must not hold up shutdown.
const releaseTimeout = 2 * time.Second

// Options configure a Leadership.
type Options struct {
	// Client is the etcd client (required); the Leadership does not close it.
	Client *clientv3.Client
	// Prefix of the election's keys (required), e.g. "/roombridge/leader".
	Prefix string
	// TTL of the session lease, rounded up to whole seconds. A leader that
	// dies is replaced after about one TTL. etcd raises TTLs below its
	// minimum (2 s with default ticks).
	TTL time.Duration
	// Name identifies this instance in the election (the leader key's value)
	// and in logs.
	Name string
	// Value is the leader key's value while this instance leads (default
	// Name): the bridge puts its binary's version and store format there,
	// for /readyz and `bridge status`.
	Value string
	// Eligible, if set, is asked before each campaign: while it returns an
	// error, this instance does not campaign (it says why in the log, once
	// per reason, and asks again every eligibleEvery). A bridge binary older
	// than its store's format is not eligible.
	Eligible func(ctx context.Context) error
	// Log receives term starts and ends. Default: discard.
	Log *slog.Logger
}

// eligibleEvery is how often an instance that is not eligible asks again.
const eligibleEvery = 2 * time.Second

// Leadership campaigns for leadership and runs the leader's work while this
// instance leads. It implements store/etcd.Fence.
type Leadership struct {
	o Options

	mu     sync.Mutex
	key    string
	rev    int64
	active bool
	end    context.CancelFunc // ends the current term's work
	cause  string             // why the current term ended
	// unsure: the last term ended because its session did (etcd
	// unreachable, or the lease expired), and no other leader is known
	// since: whether this instance still leads cannot be told (Unsure).
	unsure bool
	// ineligible is why Options.Eligible last refused ("": it did not).
	ineligible string
}

// New returns a Leadership; Run starts campaigning.
func New(o Options) (*Leadership, error) {
	if o.Client == nil {
		return nil, errors.New("election: no etcd client")
	}
	if o.Prefix == "" {
		return nil, errors.New("election: no prefix")
	}
	if o.TTL <= 0 {
		return nil, fmt.Errorf("election: lease TTL %v: must be positive", o.TTL)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Value == "" {
		o.Value = o.Name
	}
	return &Leadership{o: o}, nil
}

// ttlSeconds is the lease TTL in whole seconds, rounded up.
func (l *Leadership) ttlSeconds() int64 {
	return int64(math.Ceil(l.o.TTL.Seconds()))
}

// Term implements store/etcd.Fence: the key and revision of the term this
// instance leads, if any.
func (l *Leadership) Term() (key string, rev int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.key, l.rev, l.active
}

// Lost implements store/etcd.Fence: etcd refused a write of term rev because
// its key is gone; the term ends now.
func (l *Leadership) Lost(key string, rev int64) {
	l.stop(key, rev, "a fenced write was refused: another instance leads", false)
}

// Unsure implements store/etcd.Fence: this instance leads no term because
// its last one ended with its session (etcd could not be reached, or was
// busy electing its own leader), and no other leader has been seen since.
// Writes are then refused as "store unavailable, retry", not "fenced".
func (l *Leadership) Unsure() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.active && l.unsure
}

// Leading reports whether this instance leads now (for /readyz).
func (l *Leadership) Leading() bool {
	_, _, ok := l.Term()
	return ok
}

// stop ends term rev (if it is still the current one): writes are refused
// from now on, and the work's context is cancelled.
func (l *Leadership) stop(key string, rev int64, cause string, unsure bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.active || l.key != key || l.rev != rev {
		return
	}
	l.active = false
	l.cause, l.unsure = cause, unsure
	l.end()
}

// Run campaigns until ctx ends. Each time this instance wins, it runs lead
// with a context that is cancelled when the term ends, waits for lead to
// return, and campaigns again. lead returning an error while its term still
// holds is fatal: Run resigns and returns that error. Run returns nil when
// ctx ends.
func (l *Leadership) Run(ctx context.Context, lead func(context.Context) error) error {
	for ctx.Err() == nil {
		if !l.eligible(ctx) {
			continue
		}
		sess, err := l.session(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.o.Log.Warn("election: no session; retrying", "error", err)
				sleep(ctx, retryDelay)
			}
			continue
		}
		e := concurrency.NewElection(sess, l.o.Prefix)
		l.observe(ctx, sess, e)
		if err := l.campaign(ctx, sess, e); err != nil {
			l.release(sess, nil)
			if ctx.Err() == nil {
				l.o.Log.Warn("election: campaign ended; starting over", "error", err)
				sleep(ctx, retryDelay)
			}
			continue
		}
		if !l.allowed(ctx) {
			// It waited in line while the leader moved on (a newer store
			// format): it may no longer lead; the next in line goes.
			l.release(sess, e)
			sleep(ctx, eligibleEvery)
			continue
		}
		if err := l.term(ctx, sess, e, lead); err != nil {
			return err
		}
	}
	return nil
}

// stillHeld reports, when a term's session ended, whether etcd could not
// tell that the term is over: it does not answer (within a second), or it
// still holds the term's key (the lease outlived this client's contact with
// etcd, as during an etcd leader election). False: the key is gone or
// replaced, another instance may lead.
func (l *Leadership) stillHeld(key string, rev int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := l.o.Client.Get(ctx, key)
	if err != nil {
		return true
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == rev
}

// observe clears Unsure once etcd answers that another session leads.
func (l *Leadership) observe(ctx context.Context, sess *concurrency.Session, e *concurrency.Election) {
	octx, cancel := context.WithTimeout(ctx, max(l.o.TTL, time.Second))
	defer cancel()
	resp, err := e.Leader(octx)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == int64(sess.Lease()) {
		return
	}
	l.mu.Lock()
	l.unsure = false
	l.mu.Unlock()
}

// session grants a lease and keeps it alive. The grant is bounded by ctx;
// the keepalive and the final revoke use the client's own context, so that
// a shutdown still revokes.
func (l *Leadership) session(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, max(l.o.TTL, time.Second))
	defer cancel()
	ttl := l.ttlSeconds()
	g, err := l.o.Client.Grant(gctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("election: grant lease: %w", err)
	}
	sess, err := concurrency.NewSession(l.o.Client, concurrency.WithLease(g.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		return nil, fmt.Errorf("election: session: %w", err)
	}
	return sess, nil
}

// campaign waits until this session leads and verifies it. It gives up when
// the session or ctx ends.
func (l *Leadership) campaign(ctx context.Context, sess *concurrency.Session, e *concurrency.Election) error {
	// The session's context, not a background one: if the session expires
	// while waiting, Campaign must fail rather than report a phantom win.
	cctx, cancel := context.WithCancel(sess.Ctx())
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	done := make(chan error, 1)
	l.mu.Lock()
	value := l.o.Value
	l.mu.Unlock()
	go func() { done <- e.Campaign(cctx, value) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("election: campaign: %w", err)
		}
	case <-cctx.Done():
		// Campaign cleans up with a Resign on the client's context, which
		// waits for an unreachable etcd; don't wait with it.
		return fmt.Errorf("election: campaign: %w", context.Cause(cctx))
	}
	// Verify: the session is alive and the leader key is ours, with the
	// revision the election reports.
	select {
	case <-sess.Done():
		return errors.New("election: campaign won, but the session had ended")
	default:
	}
	vctx, vcancel := context.WithTimeout(cctx, max(l.o.TTL, time.Second))
	defer vcancel()
	resp, err := l.o.Client.Get(vctx, e.Key())
	if err != nil {
		return fmt.Errorf("election: verify leader key: %w", err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != e.Rev() || resp.Kvs[0].Lease != int64(sess.Lease()) {
		return fmt.Errorf("election: campaign won, but the leader key %s is not this session's", e.Key())
	}
	return nil
}

// term runs lead for one term and ends it.
func (l *Leadership) term(ctx context.Context, sess *concurrency.Session, e *concurrency.Election, lead func(context.Context) error) error {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key, rev := e.Key(), e.Rev()
	l.mu.Lock()
	l.key, l.rev, l.active, l.end, l.cause, l.unsure = key, rev, true, cancel, "", false
	l.mu.Unlock()
	log := l.o.Log.With("election_key", key, "term", rev)
	log.Info("election: leading")
	started := time.Now()

	go func() {
		select {
		case <-sess.Done():
			l.stop(key, rev, "the session ended (lease expired or etcd unreachable)", l.stillHeld(key, rev))
		case <-ctx.Done():
			l.stop(key, rev, "shutting down", false)
		case <-tctx.Done():
		}
	}()
	err := lead(tctx)

	l.mu.Lock()
	lost := !l.active
	cause := l.cause
	l.active = false
	l.mu.Unlock()
	cancel()
	if !lost {
		cause = "the leader work returned"
		if err != nil {
			cause = "the leader work failed"
		}
	}
	log.Info("election: term ended", "cause", cause, "led", time.Since(started).Round(time.Millisecond))
	l.release(sess, e)
	if err != nil && !lost && ctx.Err() == nil {
		return fmt.Errorf("election: leader work: %w", err)
	}
	return nil
}

// release resigns (when e is given) and revokes the session's lease, within
// releaseTimeout: the next candidate takes over at once instead of after a
// TTL.
func (l *Leadership) release(sess *concurrency.Session, e *concurrency.Election) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if e != nil {
		select {
		case <-sess.Done():
		default:
			_ = e.Resign(ctx)
		}
	}
	sess.Orphan()
	_, _ = l.o.Client.Revoke(ctx, sess.Lease())
}

// eligible asks Options.Eligible (allowed); when it refuses, it waits
// eligibleEvery and returns false.
func (l *Leadership) eligible(ctx context.Context) bool {
	if l.allowed(ctx) {
		return true
	}
	sleep(ctx, eligibleEvery)
	return false
}

// allowed asks Options.Eligible; when it refuses, it logs why (once per
// reason) and returns false.
func (l *Leadership) allowed(ctx context.Context) bool {
	if l.o.Eligible == nil {
		return true
	}
	err := l.o.Eligible(ctx)
	l.mu.Lock()
	why := ""
	if err != nil {
		why = err.Error()
	}
	changed := why != l.ineligible
	l.ineligible = why
	l.mu.Unlock()
	if err == nil {
		if changed {
			l.o.Log.Info("election: eligible to lead again; campaigning")
		}
		return true
	}
	if changed && ctx.Err() == nil {
		l.o.Log.Error("election: not campaigning: this instance may not lead", "reason", why)
	}
	return false
}

// SetValue sets the leader key's value of the next campaigns
// (Options.Value): the bridge knows its API's address only once it
// listens.
func (l *Leadership) SetValue(v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.o.Value = v
}

// Ineligible is why this instance does not campaign ("": it does).
func (l *Leadership) Ineligible() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ineligible
}

// Leader returns the value of the leader key (Options.Value of the
// instance that leads), "" when none leads.
//
// It waits at most a second: /readyz and a runner's refusal ask it, and an
// etcd out of reach must not hold them up.
func (l *Leadership) Leader(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := l.o.Client.Get(ctx, l.o.Prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("election: leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
