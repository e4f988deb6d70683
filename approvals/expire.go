package approvals

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// Expire expires the approval of timer t if it is still pending and due at
// now, in one transaction, and reports whether it did. A timer whose
// approval was settled meanwhile is removed.
func (s *Service) Expire(ctx context.Context, t store.Timer, now time.Time) (bool, error) {
	expired, err := s.ExpireBatch(ctx, []store.Timer{t}, now)
	if err != nil {
		return false, err
	}
	return expired[0], nil
}

// ExpireBatch is Expire for every timer of ts in one transaction (with the
// card updates and audit records of each): expired[i] tells whether ts[i]
// was expired. The sweeper bounds len(ts) by MaxBatch, so that the
// transaction fits the store's limits.
func (s *Service) ExpireBatch(ctx context.Context, ts []store.Timer, now time.Time) ([]bool, error) {
	now = now.UTC()
	// Read the approvals and prepare their expiries before the write
	// transaction, which uses them only if an approval's bytes are
	// unchanged: the bolt store runs every write function on one goroutine,
	// so the work moved out of it (decoding, encoding, rendering: a fifth of
	// an expiry in BenchmarkSweep) runs in parallel.
	raws := make([][]byte, len(ts))
	pres := make([]*settlement, len(ts))
	if err := s.prepareBatch(ctx, ts, now, raws, pres); err != nil {
		return nil, fmt.Errorf("approvals: expire %s: %w", batchName(ts), err)
	}
	expired := make([]bool, len(ts))
	err := s.store.Update(ctx, func(tx store.Tx) error {
		for i, t := range ts {
			ok, err := s.expireOneTx(tx, t, raws[i], pres[i], now)
			if err != nil {
				return err
			}
			expired[i] = ok
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: expire %s: %w", batchName(ts), err)
	}
	return expired, nil
}

// prepareBatch reads the approvals of ts and prepares their expiries
// (prepareExpiry) into raws and pres, taking its turn among the batches
// that do (s.reads).
func (s *Service) prepareBatch(ctx context.Context, ts []store.Timer, now time.Time, raws [][]byte, pres []*settlement) error {
	if s.reads != nil {
		select {
		case s.reads <- struct{}{}:
			defer func() { <-s.reads }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.store.View(ctx, func(tx store.Tx) error {
		for i, t := range ts {
			raws[i], pres[i] = s.prepareExpiry(tx, t, now)
		}
		return nil
	})
}

// inProcessWriter is a store whose writes all run on one goroutine of
// this process (store/bolt's committer), on the processors the sweep's
// read phases take.
type inProcessWriter interface{ WritesInProcess() bool }

// sweepReads bounds the read phases of concurrent ExpireBatch calls on a
// store whose writer runs in this process to one fewer than the
// processors (at least one), so that the writer, which the sweep waits
// on, finds one: among 1,000,000 pending, a sweep took 0.92 of its time
// unbounded (BenchmarkSweep, docs/perf.md). nil, no bound: etcd, whose
// reads wait on the network.
func sweepReads(st store.Store) chan struct{} {
	if w, ok := st.(inProcessWriter); ok && w.WritesInProcess() {
		return make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))
	}
	return nil
}

// Sizes of the sweep's batches (MaxBatch).
const (
	// expiryWrites bounds the keys one expiry writes: about 13 (the
	// approval, its two timers and two open indexes, the request and its
	// state index, the audit record and its index, one effect for the
	// request's thread, the counters), and one effect for each copy of
	// its card outside that thread; 30 leaves room for many copies.
	expiryWrites = 30
	// maxBatch bounds a batch on any store: on bolt, which bounds no
	// transaction, 16 expiries a call of its group commit took a fifth
	// less time a sweep than 4 (fewer reads, calls and commits:
	// BenchmarkSweep, docs/perf.md); a batch refused as a whole is
	// expired again one by one, and more would make that dearer.
	maxBatch = 16
)

// writeLimiter is a store that bounds the keys one transaction writes
// (store/etcd: its Txn's ops).
type writeLimiter interface{ MaxWrites() int }

// MaxBatch is how many expiries one ExpireBatch makes at most: as many as
// fit one transaction of the store (4 in etcd's default 128 ops a Txn),
// at most maxBatch. It makes the Service a ttl.BatchExpirer.
func (s *Service) MaxBatch() int {
	if l, ok := s.store.(writeLimiter); ok {
		return max(1, min(maxBatch, l.MaxWrites()/expiryWrites))
	}
	return maxBatch
}

// batchName names a batch of timers in errors: its first ID and its size.
func batchName(ts []store.Timer) string {
	if len(ts) == 1 {
		return ts[0].ID
	}
	return fmt.Sprintf("%s (+%d)", ts[0].ID, len(ts)-1)
}

// prepareExpiry reads the approval of t and, if it is pending and due,
// prepares its expiry: the bytes read and the settlement, with the request
// it expires as read (nil, nil when there is nothing to prepare: the write
// transaction sees and handles it).
func (s *Service) prepareExpiry(tx store.Tx, t store.Timer, now time.Time) ([]byte, *settlement) {
	b, err := tx.Get(bucketApprovals, t.ID)
	if err != nil {
		return nil, nil
	}
	var a Approval
	if store.Decode(b, &a) != nil || a.State != Pending || now.Before(a.ExpiresAt) {
		return nil, nil
	}
	st, err := settleExpiry(&a, now, s.deferThreads())
	if err != nil {
		return nil, nil
	}
	if a.Kind == KindRequest {
		rd, err := s.svc.ReadTx(tx, a.RequestID) // none: read again in the write
		if err == nil {
			st.request = s.svc.PrepareChange(rd, st.change)
		}
	}
	return b, st
}

// expireOneTx expires the approval of t in tx, using pre (prepared from raw)
// when the approval is unchanged, and reports whether it expired it.
func (s *Service) expireOneTx(tx store.Tx, t store.Timer, raw []byte, pre *settlement, now time.Time) (bool, error) {
	st := pre
	same, err := store.Unchanged(tx, bucketApprovals, t.ID, raw)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, store.RemoveTimer(tx, TimerKind, t.Due, t.ID)
	case err != nil:
		return false, err
	case st == nil || !same:
		a, err := getKeyTx(tx, t.ID, t.ID)
		switch {
		case err != nil:
			return false, err
		case a.State != Pending:
			return false, store.RemoveTimer(tx, TimerKind, t.Due, t.ID)
		case now.Before(a.ExpiresAt):
			return false, nil
		}
		if st, err = settleExpiry(a, now, s.deferThreads()); err != nil {
			return false, err
		}
	}
	if _, err := s.expireTx(tx, st); err != nil {
		return false, err
	}
	return true, nil
}

// deferThreads tells whether the sweeper's expiries leave their thread's
// effects to the outbox's expansion (expandExpiredTx).
func (s *Service) deferThreads() bool { return s.threads != nil && !s.renderInSweep }

// settleExpiry prepares pending approval a's expiry at now: its settlement
// and, for a request's approval, the retry offer and the change to the
// request (st.change). With deferThread (the sweeper's), the effects in
// the thread where a's card has its copy are not rendered: one OpExpand
// effect stands for them (st.expand), which the outbox renders when it
// delivers it.
func settleExpiry(a *Approval, now time.Time, deferThread bool) (*settlement, error) {
	st, err := settleExpiryCards(a, now, deferThread)
	if err == nil && a.Kind == KindRequest {
		st.change = expiryChange(st)
	}
	return st, err
}

// settleExpiryCards is settleExpiry but for the change to the request.
func settleExpiryCards(a *Approval, now time.Time, deferThread bool) (*settlement, error) {
	var thread Copy
	if deferThread && a.Kind == KindRequest {
		thread, _ = threadCopy(a)
	}
	q := thread.queue()
	st, err := settleExcept(a, Expired, ActorTTL, "", "", now, q)
	if err != nil || a.Kind != KindRequest {
		return st, err
	}
	if st.retry, err = prepareRetry(st.after, q); err != nil || q == "" {
		return st, err
	}
	// The expansion renders the copies in q, the ending, an offer under
	// each thread copy in q (expiredTx).
	span := threads.EndedEffects
	for _, c := range st.after.Copies {
		if c.queue() == q {
			span++
			if c.inThread(st.after) {
				span++
			}
		}
	}
	if st.expand, err = threads.PrepareExpand(expandExpired, st.after.ref().key(), thread.Request, thread.Surface, span); err != nil {
		return nil, err
	}
	st.deferred = q
	return st, nil
}

// threadCopy is the copy of a's card in its request's thread.
func threadCopy(a *Approval) (Copy, bool) {
	for _, c := range a.Copies {
		if c.inThread(a) {
			return c, true
		}
	}
	return Copy{}, false
}

// inThread tells whether c is the copy of a's card in a request's thread.
func (c Copy) inThread(a *Approval) bool { return c.Ref == "approval/"+a.ID+"/thread" }

// queue is the outbox queue of c's effects ("": the zero Copy).
func (c Copy) queue() string {
	if c.Request == "" {
		return ""
	}
	return threads.Effect{Surface: c.Surface, Request: c.Request}.Queue()
}

// expireNowTx expires pending approval a at now (due: its TTL passed).
func (s *Service) expireNowTx(tx store.Tx, a *Approval, now time.Time) (*Approval, error) {
	st, err := settleExpiry(a, now, false)
	if err != nil {
		return nil, err
	}
	return s.expireTx(tx, st)
}

// expireTx applies st (settleExpiry), the expiry of a pending approval: a
// request's approval moves its request to expired (never a denial); an agent's
// permission is answered "not approved: expired", its question "no answer:
// expired" (never an answer). Audited as system:ttl; every card copy
// updated (those in the request's thread through st.expand, if deferred).
func (s *Service) expireTx(tx store.Tx, st *settlement) (*Approval, error) {
	a := st.before
	after, err := st.applyTx(tx)
	if err != nil {
		return nil, err
	}
	if a.Kind == KindRequest {
		r, err := s.svc.ApplyReadTx(tx, a.RequestID, st.request, st.change)
		if err == nil {
			err = s.enqueueExpiredTx(tx, st, r)
		}
		if !requests.Refused(err, a.RequestID) {
			return after, err // expired with its request (the request's record is the audit record)
		}
		// The request left pending some other way (ApplyTx refuses before
		// it writes): the approval alone expires, all its cards updated.
		if err := s.enqueueDeferredCardsTx(tx, st); err != nil {
			return nil, err
		}
	}
	detail, action := expiryDetail(a), "expire"
	if a.Kind != KindRequest {
		who := "decided"
		if a.Kind == KindQuestion {
			// Not an approval: metrics count approval expiries by "expire".
			who, action = "answered", "question_expired"
		}
		detail = noun(a) + " " + a.ID + ": " + clip.Line(a.Action, 200, clip.Bytes) + ": nobody " + who + " within " + Duration(a.TTL)
	}
	return after, audit.Append(tx, audit.Record{
		Time: after.DecidedAt, RequestID: a.RequestID.String(), Actor: ActorTTL, Action: action,
		From: string(Pending), To: string(Expired), Detail: detail,
	})
}

// expiryChange is the change st makes to the request of a request's
// approval.
func expiryChange(st *settlement) requests.Change {
	reason := "not approved within " + Duration(st.before.TTL)
	// This observer is skipped: it would withdraw the request's open
	// approvals, and a pending request has one, this one, settled first
	// (expireTx); its agent never ran, so asked for nothing.
	c := requests.Change{Event: requests.Expire, Actor: ActorTTL, Skip: skipSelf,
		Detail: expiryDetail(st.before), Mutate: func(r *requests.Request) { r.Reason = reason }}
	if st.deferred != "" {
		c.Skip = skipBoth // and EndedTx, at the expansion
	}
	return c
}

var (
	skipSelf = []string{ObserverName}
	skipBoth = []string{ObserverName, threads.ObserverName}
)

// expiryDetail is the audit detail of a's expiry.
func expiryDetail(a *Approval) string {
	return "approval " + a.ID + ": nobody decided within " + Duration(a.TTL)
}

// enqueueExpiredTx queues, after st expired request r, the retry offer
// and, if st deferred them, the effects in r's thread: as st.expand, or
// (r's thread is not where the card's copy is: a changed configuration)
// rendered now.
func (s *Service) enqueueExpiredTx(tx store.Tx, st *settlement, r *requests.Request) error {
	if err := threads.EnqueueAll(tx, st.retry); err != nil || st.deferred == "" {
		return err
	}
	if s.threads.EndedQueue(r) == st.deferred {
		return st.expand.EnqueueTx(tx)
	}
	// Rendered now: the copies in the card's thread, and r's ending in r's
	// thread, as its observer (skipped) would have queued it.
	ps, err := s.expiredTx(tx, st.after, r, st.deferred, "")
	if err != nil {
		return err
	}
	return threads.EnqueueAll(tx, ps)
}

// enqueueDeferredCardsTx queues the updates of the card copies st deferred.
func (s *Service) enqueueDeferredCardsTx(tx store.Tx, st *settlement) error {
	if st.deferred == "" {
		return nil
	}
	cards, err := prepareCards(st.after, Card(st.after))
	if err != nil {
		return err
	}
	return threads.EnqueueAll(tx, slices.DeleteFunc(cards, elsewhere(st.deferred)))
}

// expandExpired is the kind of the OpExpand effect of an expired request's
// thread (settleExpiry, expandExpiredTx).
const expandExpired = "approval_expired"

// expandExpiredTx is the threads.Expander of expandExpired: the effects of
// an expiry in the thread of e, rendered from the expired approval e.Ref
// names and its request.
func (s *Service) expandExpiredTx(tx store.Tx, e threads.Effect) ([]threads.Prepared, error) {
	a, err := getKeyTx(tx, e.Ref, e.Ref)
	if errors.Is(err, ErrUnknown) {
		return nil, fmt.Errorf("approvals: expand: %w: %w", chat.ErrPermanent, err)
	}
	if err != nil {
		return nil, err
	}
	r, err := s.svc.GetTx(tx, a.RequestID)
	if errors.Is(err, requests.ErrUnknown) {
		return nil, fmt.Errorf("approvals: expand: %w: %w", chat.ErrPermanent, err)
	}
	if err != nil {
		return nil, err
	}
	return s.expiredTx(tx, a, r, e.Queue(), e.Surface)
}

// expiredTx renders the effects of expired approval a and its request r in
// thread queue q, in the order an expiry rendering them at once queues them:
// the card's copies there, r's ending (threads.EndedTx) on surface (""
// where the configuration places r's thread: none, no ending), the retry
// offer.
func (s *Service) expiredTx(tx store.Tx, a *Approval, r *requests.Request, q, surface string) ([]threads.Prepared, error) {
	cards, err := prepareCards(a, Card(a))
	if err != nil {
		return nil, err
	}
	var ended []threads.Prepared
	if surface == "" {
		surface, _, _ = s.threads.Place(r)
	}
	if surface != "" {
		if ended, err = s.threads.EndedTx(tx, r, surface); err != nil {
			return nil, err
		}
	}
	retry, err := prepareRetry(a, "")
	if err != nil {
		return nil, err
	}
	return slices.Concat(slices.DeleteFunc(cards, elsewhere(q)), ended, slices.DeleteFunc(retry, elsewhere(q))), nil
}

// elsewhere tells whether an effect goes to a queue other than q.
func elsewhere(q string) func(threads.Prepared) bool {
	return func(p threads.Prepared) bool { return p.Queue() != q }
}

// prepareRetry prepares RetryOffer's post in the asking request's thread,
// under the expired card's copy there (none: no thread, no offer), unless
// it goes to queue except.
func prepareRetry(a *Approval, except string) ([]threads.Prepared, error) {
	var ps []threads.Prepared
	for _, c := range a.Copies {
		if !c.inThread(a) || (except != "" && c.queue() == except) {
			continue
		}
		p, err := threads.Prepare(threads.Effect{Op: threads.OpReply, Request: c.Request, Surface: c.Surface,
			Save: "approval/" + a.ID + "/retry", Message: RetryOffer(a)})
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}
