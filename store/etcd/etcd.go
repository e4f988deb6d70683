// Package etcd is the highly available Store on etcd: every write of the
// leader is one etcd transaction that also checks, in the same transaction,
// that this instance still holds leadership (the fence), so a paused or
// partitioned old leader can never write after it lost.
//
// Layout: the value of key k in bucket b lives at <prefix>/<b>/<k>; a bucket
// is a key range, so Scan is one range read (paged).
//
// Transactions: only the leader writes, so writers are serialized in the
// process. Concurrent Update calls are group-committed: the calls queued
// while one etcd Txn is in flight run one after the other against the same
// read revision, each seeing its predecessors' writes, and their writes
// commit as ONE etcd Txn. That Txn compares
//
//   - the fence: CreateRevision(electionKey) == the leader's revision, and
//   - every key read from etcd (ModRevision unchanged since the read
//     revision) and every scanned range (no key in it modified after the read
//     revision), as a safety net against any other writer.
//
// If the fence compare fails the calls get store.ErrFenced and the Fence is
// told (Lost): that is how the instance learns it lost leadership. If only a
// read compare fails, the group is run again from a fresh read. With a fence,
// a group that writes nothing still commits an empty Txn carrying the fence
// compare, so a successful Update always means "led at commit time".
//
// Size limits: etcd refuses a Txn with more than max-txn-ops (default 128)
// puts/deletes or compares, or over max-request-bytes. A group is split
// between calls so that each Txn stays within the limits (each call's writes
// stay atomic); a single call whose own writes exceed them is refused with
// ErrTooLarge and nothing is written, never split across Txns. Read compares
// beyond the limit are dropped (the fence alone still guards the write).
//
// Notifications are published in-process after the commit (store.Notifier).
// Followers do no leader work, so they are not woken by the leader's writes;
// a new leader reads its queues when its work starts.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/roombridge/roombridge/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of Options.
const (
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultMaxTxnBytes keeps a Txn well under etcd's default
	// --max-request-bytes (1.5 MiB), leaving room for the compares.
	DefaultMaxTxnBytes = 1 << 20
	// DefaultTimeout bounds one commit or read against etcd: long enough for
	// an etcd leader election (≤ a few seconds), short enough that a bridge
	// cut off from etcd notices.
	DefaultTimeout = 10 * time.Second
)

// maxBatch bounds how many queued Update calls one group considers.
const maxBatch = 256

// scanPage is how many keys one range read of a Scan fetches.
const scanPage = 256

// maxConflictRetries bounds how often a group is rerun after a read compare
// failed (another writer changed a key it read); with a single leader this
// never happens.
const maxConflictRetries = 3

// ErrTooLarge (wraps store.ErrTooLarge): one Update's writes do not fit in a single etcd transaction
// (max-txn-ops or the request size limit). Nothing was written.
var ErrTooLarge = fmt.Errorf("store: etcd: %w for one etcd Txn", store.ErrTooLarge)

// Fence tells the store which leadership term its writes belong to. It is
// implemented by election.Leadership.
type Fence interface {
	// Term returns the election key and its CreateRevision for the term this
	// instance leads now; ok is false when it leads none (writes are then
	// refused with store.ErrFenced without asking etcd).
	Term() (key string, rev int64, ok bool)
	// Lost is called when etcd refused a write because the election key of
	// term rev is gone or was replaced: that term is over.
	Lost(key string, rev int64)
	// Unsure reports, while no term is led, that whether this instance
	// leads cannot be told (its last term ended because etcd could not be
	// reached): writes are then refused with store.ErrUnavailable (retry),
	// not store.ErrFenced.
	Unsure() bool
}

// Options configure a Store.
type Options struct {
	// Prefix of every key (required), e.g. "/roombridge/store".
	Prefix string
	// Fence guards every write. Nil: no fence (tests, or a deployment that
	// guarantees a single writer by other means).
	Fence Fence
	// MaxTxnOps is the server's --max-txn-ops (default DefaultMaxTxnOps).
	MaxTxnOps int
	// MaxTxnBytes bounds the keys and values of one Txn (default
	// DefaultMaxTxnBytes).
	MaxTxnBytes int
	// Timeout bounds each etcd round trip of a commit (default
	// DefaultTimeout).
	Timeout time.Duration
	// Log receives warnings (fenced writes, conflicts). Default: discard.
	Log *slog.Logger
	// Absent names the buckets whose keys are nearly always missing when
	// an Update reads them (default DefaultAbsent). Such a read, not in the
	// group's cache, is answered "missing" without a round trip; the Txn
	// compares that the key has no revision, and if it has (the guess was
	// wrong: a redelivered event), the group runs again reading it from
	// etcd. Nothing is written on a wrong guess. A key this store wrote or
	// read (the newest presentKeys of them) is never guessed: a single
	// writer guesses wrong only about keys of an earlier process.
	Absent []string
}

// DefaultAbsent is Options.Absent's default: the dedupe keys of inbound
// events (a new event's key is never there).
var DefaultAbsent = []string{store.BucketDedupe}

// Store is a store.Store on etcd.
type Store struct {
	cli    *clientv3.Client
	prefix string
	opt    Options
	store.Notifier

	gc     *store.GroupCommit
	absent map[string]bool // Options.Absent
	// present: keys of Options.Absent that this store wrote or read, not
	// guessed missing. Used only by the committing goroutine.
	present *recent

	// warm is what the committed groups read and wrote, as of the
	// revision of the last one's Txn: the next group starts from it instead
	// of reading the same keys (sequence counters, indexes) from etcd
	// again. Its entries are only a starting point: the next Txn compares
	// the ModRevision of every key it read, cached or not, so a key another
	// writer changed makes it a conflict, run again from fresh reads. It
	// holds two generations of at most warmKeys keys each (warm, the newer,
	// and warmOld): a key found in the older moves to the newer, and when
	// the newer is full it becomes the older and the older is dropped, so
	// the keys every group touches (counters) stay while the keys written
	// once (requests, records) leave. Used only by the committing goroutine.
	warm, warmOld map[string]cached
	warmRev       int64
	warmAt        time.Time
	warmTerm      int64 // the fence's term (its revision) the cache was kept in
}

// warmFor bounds how long a warm cache is used: its revision must not be
// compacted away before a group reads at it. A variable for the tests.
var warmFor = time.Second

// warmKeys bounds a generation of the warm cache: about a megabyte of
// creations' keys and values.
const warmKeys = 4096

var _ store.Store = (*Store)(nil)

// New returns a Store on cli. The client is borrowed: Close does not close it.
func New(cli *clientv3.Client, o Options) (*Store, error) {
	if o.Prefix == "" || !strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/") {
		return nil, fmt.Errorf("store: etcd: prefix %q: want a path like /roombridge/store", o.Prefix)
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxTxnOps < 3 {
		return nil, fmt.Errorf("store: etcd: max txn ops %d: want at least 3", o.MaxTxnOps)
	}
	if o.MaxTxnBytes <= 0 {
		o.MaxTxnBytes = DefaultMaxTxnBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Absent == nil {
		o.Absent = DefaultAbsent
	}
	s := &Store{cli: cli, prefix: o.Prefix, opt: o, absent: map[string]bool{}, present: newRecent(presentKeys)}
	for _, b := range o.Absent {
		s.absent[b] = true
	}
	s.gc = store.NewGroupCommit(maxBatch, s.commit)
	return s, nil
}

// Client returns the etcd client the store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// MaxWrites is how many keys one Update may write: a Txn's ops less the
// one a fenced Txn spends on the election key. An Update that writes more
// is refused (ErrTooLarge); callers that batch work size their batches by
// it (the sweep's).
func (s *Store) MaxWrites() int { return s.opt.MaxTxnOps - 1 }

// MaxWriteBytes is how many bytes of keys (with the store's prefix) and
// values one Update may write (Options.MaxTxnBytes): a restore sizes its
// batches by it.
func (s *Store) MaxWriteBytes() int { return s.opt.MaxTxnBytes }

// Update implements store.Store. Once queued, a call is answered:
// committed, refused, or (if every caller of its group gave up while etcd did
// not answer) "outcome unknown".
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.gc.Update(ctx, fn)
}

// View implements store.Store: fn reads one consistent revision.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if s.gc.Closed() {
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(&tx{g: &group{s: s, ctx: ctx}})
}

// Close stops the committer. Queued calls get store.ErrClosed. The client
// stays open.
func (s *Store) Close() error {
	s.gc.Close()
	return nil
}

// commit runs the calls of batch in order, in as few etcd Txns as the limits
// allow, and answers each.
func (s *Store) commit(batch []*store.Call) {
	retries := 0
	guess := true // reads of Options.Absent may be guessed missing
	for len(batch) > 0 {
		ctx, cancel := s.groupContext(batch)
		g := &group{s: s, ctx: ctx, writes: map[string]write{}, reads: map[string]int64{}, cache: map[string]cached{}, guess: guess}
		var fenceKey string
		var fenceRev int64
		if f := s.opt.Fence; f != nil {
			var ok bool
			if fenceKey, fenceRev, ok = f.Term(); !ok {
				cancel()
				refusal := fmt.Errorf("store: etcd: update: %w", store.ErrFenced)
				if f.Unsure() {
					refusal = fmt.Errorf("store: etcd: update: leadership unknown since etcd was unreachable: %w", store.ErrUnavailable)
				}
				for _, c := range batch {
					c.Done(refusal)
				}
				return
			}
		}
		warm := s.takeWarm(g, fenceRev)
		members, topics, rest := s.runGroup(g, batch, fenceKey != "")
		rev, verified, err := s.txn(g, fenceKey, fenceRev)
		cancel()
		switch {
		case errors.Is(err, errConflict) && len(g.guessed) > 0:
			guess = false // a key guessed missing was there: read them all
			batch = append(members, rest...)
			continue
		case errors.Is(err, errConflict) && (warm || retries < maxConflictRetries):
			if !warm { // a stale warm cache is not a conflict of the calls
				retries++
				s.opt.Log.Warn("etcd store: a key read changed under the transaction; running it again", "attempt", retries)
			}
			batch = append(members, rest...)
			continue
		case err != nil:
			for _, c := range members {
				c.Done(err)
			}
		default:
			s.keepWarm(g, rev, verified, fenceRev)
			for i, c := range members {
				s.Publish(topics[i]...)
				c.Done(nil)
			}
		}
		batch = rest
		retries, guess = 0, true
	}
}

// runGroup runs the calls of batch into g, as many as fit one Txn, and
// returns them (with what each notified) and the calls left for the next
// group. Calls that fail, or whose context ended, are answered here.
func (s *Store) runGroup(g *group, batch []*store.Call, fenced bool) (members []*store.Call, topics []store.Topics, rest []*store.Call) {
	for i, c := range batch {
		if err := c.Ctx.Err(); err != nil {
			c.Done(err)
			continue
		}
		t, err := s.runCall(g, c)
		if err != nil {
			c.Done(err)
			continue
		}
		if !g.fits(t, fenced) {
			if len(members) == 0 {
				c.Done(fmt.Errorf("%w: %d writes, %d bytes (limits: %d ops, %d bytes)",
					ErrTooLarge, len(t.writes), t.bytes(), s.opt.MaxTxnOps-1, s.opt.MaxTxnBytes))
				continue
			}
			return members, topics, batch[i:] // run again in the next group, after this one commits
		}
		g.merge(t)
		members = append(members, c)
		topics = append(topics, t.topics)
	}
	return members, topics, nil
}

// runCall runs c on a new view of g. A call that fails after reading keys
// guessed missing (Options.Absent) is run again with those keys read from
// etcd: its failure may come from the guess (an Idempotency-Key whose first
// request exists, refused "queue full" instead of replayed; a redelivered
// reply refused because its request has ended), and a failed call's guesses
// are never compared. One more read per failing call that guessed, and
// only then.
func (s *Store) runCall(g *group, c *store.Call) (*tx, error) {
	t := &tx{g: g, writable: true, writes: map[string]write{}, reads: map[string]int64{}}
	err := c.Run(t)
	if err == nil || len(t.guessed) == 0 {
		return t, err
	}
	for k := range t.guessed {
		delete(g.cache, k) // a member's guess of k is still compared: a conflict if k is there
		delete(g.older, k)
	}
	guess := g.guess
	g.guess = false
	defer func() { g.guess = guess }()
	t = &tx{g: g, writable: true, writes: map[string]write{}, reads: map[string]int64{}}
	return t, c.Run(t)
}

// takeWarm starts g from the warm cache, if it is recent and was kept in
// the fence's term (another leader may have written between two terms of
// this one), and reports whether it did; the cache is the group's from now
// on.
func (s *Store) takeWarm(g *group, term int64) bool {
	w, old := s.warm, s.warmOld
	s.warm, s.warmOld = nil, nil
	if w == nil || time.Since(s.warmAt) > warmFor || term != s.warmTerm {
		return false
	}
	g.cache, g.older, g.rev, g.warm = w, old, s.warmRev, true
	return true
}

// keepWarm keeps what group g read and wrote as the warm cache, as of
// revision rev, its Txn's (0: no Txn was made, nothing is kept), in the
// fence's term. Reads are kept only if the Txn compared them all
// (verified).
func (s *Store) keepWarm(g *group, rev int64, verified bool, term int64) {
	if rev == 0 {
		return
	}
	c, old := g.cache, g.older
	if !verified || len(g.spans) > 0 {
		// A Scan's keys are not in the cache, but a read may be stale
		// without its compare: keep only what this Txn wrote.
		c, old = make(map[string]cached, len(g.writes)), nil
	}
	s.remember(g)
	for k, w := range g.writes {
		if w.del {
			c[k] = cached{}
		} else {
			c[k] = cached{value: w.value, modRev: rev}
		}
	}
	if len(c) > warmKeys {
		c, old = make(map[string]cached, warmKeys), c
	}
	s.warm, s.warmOld, s.warmRev, s.warmAt, s.warmTerm = c, old, rev, time.Now(), term
}

// remember adds the keys of Options.Absent that committed group g wrote, or
// read as there, to the keys never guessed missing.
func (s *Store) remember(g *group) {
	for k, w := range g.writes {
		if !w.del && s.isAbsent(k) {
			s.present.add(k)
		}
	}
	for k, rev := range g.reads {
		if rev != 0 && s.isAbsent(k) {
			s.present.add(k)
		}
	}
}

// isAbsent reports whether full key k is in a bucket of Options.Absent.
func (s *Store) isAbsent(k string) bool {
	b, _, ok := strings.Cut(strings.TrimPrefix(k, s.prefix+"/"), "/")
	return ok && s.absent[b]
}

// groupContext returns the context of one group's etcd calls: bounded by
// the timeout, and ended early once every caller of the group has given up
// (a leader losing its term must not wait for an unreachable etcd).
func (s *Store) groupContext(batch []*store.Call) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	var live atomic.Int64
	live.Store(int64(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, c := range batch {
		stops = append(stops, context.AfterFunc(c.Ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-s.gc.Stopping():
			cancel()
		}
	}()
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// errConflict: a read compare failed (another writer changed what a group
// read), while the fence still held.
var errConflict = errors.New("store: etcd: conflict")

// txn commits g's writes as one etcd Txn guarded by the fence and g's read
// compares.
func (s *Store) txn(g *group, fenceKey string, fenceRev int64) (rev int64, verified bool, err error) {
	check := len(g.writes) > 0 || len(g.guessed) > 0 || g.behind()
	if !check && fenceKey == "" {
		return 0, false, nil // nothing to write, nothing to check
	}
	var cmps []clientv3.Cmp
	if fenceKey != "" {
		// Even an Update that writes nothing is checked: a successful Update
		// means "this instance led at commit time" (callers use an empty
		// Update as a claim before an effect outside the store).
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(fenceKey), "=", fenceRev))
	}
	if len(g.guessed) > s.opt.MaxTxnOps-len(cmps) {
		return 0, false, errConflict // the guesses cannot all be checked: read them
	}
	if check {
		reads := g.compares(s.opt.MaxTxnOps - len(cmps))
		verified = len(reads) == len(g.spans)+len(g.reads)
		if g.warm && !verified {
			// Reads at the warm revision that the Txn cannot all compare
			// may be stale: run the group again from etcd.
			return 0, false, errConflict
		}
		cmps = append(cmps, reads...)
	}
	ops := make([]clientv3.Op, 0, len(g.writes))
	for _, k := range slices.Sorted(maps.Keys(g.writes)) {
		w := g.writes[k]
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.value)))
		}
	}
	var orElse []clientv3.Op
	if fenceKey != "" {
		orElse = append(orElse, clientv3.OpGet(fenceKey))
	}
	resp, err := s.cli.Txn(g.ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		if g.ctx.Err() != nil {
			// Not answered in time: the Txn may or may not have committed.
			// The store is unavailable (a caller retries; the writes of
			// this store's callers are idempotent at that point).
			return 0, false, fmt.Errorf("store: etcd: commit: outcome unknown: %w: %w", store.ErrUnavailable, err)
		}
		return 0, false, wrap("commit", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, verified, nil
	}
	if fenceKey != "" {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 || kvs[0].CreateRevision != fenceRev {
			s.opt.Log.Warn("etcd store: write refused: leadership lost", "election_key", fenceKey, "term", fenceRev)
			s.opt.Fence.Lost(fenceKey, fenceRev)
			return 0, false, fmt.Errorf("store: etcd: commit: %w", store.ErrFenced)
		}
	}
	return 0, false, errConflict
}
