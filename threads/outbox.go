package threads

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/store"
)

// Back-off after a failed delivery: doubling from minBackoff, capped at
// maxBackoff. Rate limits are honoured inside the connectors; this back-off is
// for outages and unexpected errors.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = time.Minute
	// batchSize bounds how many pending effects one round reads.
	batchSize = 512
	// parallelQueues bounds how many threads are delivered to at once.
	parallelQueues = 8
)

// Deliverer sends outbox effects through the connectors: in order within a
// thread, threads in parallel, each success recorded (message refs saved,
// effect removed) in one transaction; failures retried with back-off and
// audited.
//
// An effect is in doubt when its post may have gone out without being
// recorded: the first pending effect of each thread when a term begins (an
// earlier process or leader may have posted it and stopped before recording
// it; the effects behind it were never tried, since a thread's effects are
// tried in order, each recorded before the next), and an effect whose last
// attempt failed without the platform saying it posted nothing (only a rate
// limit says so). Through a Finder connector, an effect in doubt is looked
// for before it is posted; all other deliveries make no lookup.
type Deliverer struct {
	store      store.Store
	connectors map[string]route // by surface
	clock      clock.Clock
	log        *slog.Logger

	mu      sync.Mutex
	doubt   map[uint64]bool // seq → in doubt
	newTerm bool            // the next round puts the head of each thread in doubt
	ops     map[uint64]Op   // seq → its payload's op, for the effects of the last round

	// pendingFx reads the outbox's head: each round decodes only the
	// effects it has not seen.
	pendingFx store.EffectCache

	// OnDelivered, if set, is told of each effect delivered: its surface
	// and the time since it was enqueued (metrics). Set it before Run.
	OnDelivered func(surface string, latency time.Duration)
	// Live, if set, closes a request's live message with its outcome (the
	// final answer lands in it instead of a new reply). Set it before Run.
	Live *Live
	// Expand expands an OpExpand effect in the outbox (Threads.ExpandTx);
	// unset, such effects wait, each attempt audited as failed. Set it
	// before Run.
	Expand func(tx store.Tx, se store.Effect) error
}

// NewDeliverer returns a Deliverer for the given connectors. A Fenced
// connector is sent through with every ability of the connector it wraps,
// each delivery attempt preceded by its claim.
func NewDeliverer(s store.Store, c clock.Clock, log *slog.Logger, connectors ...chat.Connector) *Deliverer {
	m := map[string]route{}
	for _, cn := range connectors {
		m[cn.Surface()] = routeOf(cn)
	}
	return &Deliverer{store: s, connectors: m, clock: c, log: log, doubt: map[uint64]bool{}, newTerm: true}
}

// Run delivers until ctx ends, woken by outbox notifications, back-off
// deadlines and its own deliveries ending (no polling). Each Run begins a
// term (a leader's): the effects that were first of their thread when it
// starts are in doubt. Flush after Run continues its term.
func (d *Deliverer) Run(ctx context.Context) error {
	d.mu.Lock()
	d.newTerm = true
	d.mu.Unlock()
	return d.dispatch(ctx)
}

// Flush delivers until the outbox is empty (nil) or ctx ends (an error
// saying how many effects are left): a graceful shutdown bounds it by its
// grace period. Effects held back (a coalesced edit, a retry after a
// failure or a 429) are waited for while ctx allows; when the earliest of
// them is due only after ctx's deadline, Flush gives up at once.
func (d *Deliverer) Flush(ctx context.Context) error {
	wake, cancel := d.store.Subscribe(store.TopicOutbox)
	defer cancel()
	for {
		if ctx.Err() != nil {
			return d.left(ctx, ctx.Err())
		}
		next, err := d.DeliverOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.ErrorContext(ctx, "outbox round failed", "error", err)
			next = d.clock.Now().Add(minBackoff)
		}
		if n, err := d.pending(ctx); err == nil && n == 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && !next.IsZero() && next.After(dl) {
			return d.left(ctx, fmt.Errorf("the next is due at %s, after the deadline", next.Format(time.RFC3339Nano)))
		}
		d.wait(ctx, wake, nil, next)
	}
}

// pending counts the effects in the outbox (up to batchSize).
func (d *Deliverer) pending(ctx context.Context) (int, error) {
	var n int
	err := d.store.View(ctx, func(tx store.Tx) error {
		p, err := d.pendingFx.Pending(tx, batchSize)
		n = len(p)
		return err
	})
	return n, err
}

// left is Flush's error when effects are left (how many, and why); nil
// when none is.
func (d *Deliverer) left(ctx context.Context, why error) error {
	// ctx may be over: count within a second of our own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	n, err := d.pending(cctx)
	switch {
	case err != nil:
		return fmt.Errorf("threads: flush: effects left (counting them failed: %v): %w", err, why)
	case n == 0:
		return nil // the last went out as ctx ended
	}
	return fmt.Errorf("threads: flush: %d effect(s) left: %w", n, why)
}

// DeliverOnce makes one delivery round over the pending effects, every
// ready thread's effects in order, and returns when the earliest
// backed-off effect is due (zero: none is waiting).
func (d *Deliverer) DeliverOnce(ctx context.Context) (time.Time, error) {
	p, err := d.plan(ctx, nil, nil, 0)
	if err != nil {
		return time.Time{}, err
	}
	next := p.next
	sem := make(chan struct{}, parallelQueues)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, q := range p.order {
		wg.Add(1)
		sem <- struct{}{}
		go func(effects []store.Effect) {
			defer wg.Done()
			defer func() { <-sem }()
			if retryAt := d.deliverQueue(ctx, effects); !retryAt.IsZero() {
				mu.Lock()
				if next.IsZero() || retryAt.Before(next) {
					next = retryAt
				}
				mu.Unlock()
			}
		}(p.queues[q])
	}
	wg.Wait()
	if p.full {
		// More may be waiting behind this batch.
		return d.clock.Now(), nil
	}
	return next, nil
}

// markHeads, in the first round of a term, puts in doubt the first pending
// effect of each thread that posts (an update is safe to repeat).
func (d *Deliverer) markHeads(pending []store.Effect) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.newTerm {
		return
	}
	d.newTerm = false
	seen := map[string]bool{}
	for _, se := range pending {
		if seen[se.Queue] {
			continue
		}
		seen[se.Queue] = true
		if op, ok := d.opLocked(se); ok && op != OpUpdate && op != OpExpand { // an expansion posts nothing
			d.doubt[se.Seq] = true
		}
	}
}

// opLocked is the op of e's payload (ok false: it does not decode),
// decoded once per effect: a round looks at every thread's head.
func (d *Deliverer) opLocked(e store.Effect) (op Op, ok bool) {
	if op, ok := d.ops[e.Seq]; ok {
		return op, true
	}
	var head struct {
		Op Op `json:"op"`
	}
	if json.Unmarshal(e.Payload, &head) != nil {
		return "", false
	}
	if d.ops == nil {
		d.ops = map[uint64]Op{}
	}
	if head.Op != OpExpand { // its sequence number gets its first part's payload
		d.ops[e.Seq] = head.Op
	}
	return head.Op, true
}

// keepOps forgets the ops of effects no longer pending.
func (d *Deliverer) keepOps(pending []store.Effect) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ops) == 0 {
		return
	}
	keep := make(map[uint64]Op, len(pending))
	for _, e := range pending {
		if op, ok := d.ops[e.Seq]; ok {
			keep[e.Seq] = op
		}
	}
	d.ops = keep
}

// setDoubt records whether effect seq is in doubt.
func (d *Deliverer) setDoubt(seq uint64, in bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if in {
		d.doubt[seq] = true
	} else {
		delete(d.doubt, seq)
	}
}

func (d *Deliverer) inDoubt(seq uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.doubt[seq]
}

// effectKey is the idempotency key of an effect enqueued without one (a
// reply): the same at every delivery, and unique across outboxes (its
// sequence number and enqueue time: a store made anew counts from 1 again).
func effectKey(surface string, se store.Effect) string {
	return surface + "/outbox/" + strconv.FormatUint(se.Seq, 10) + "-" + strconv.FormatInt(se.Created.UnixMicro(), 36)
}

// deliver sends one effect. It reports false, with the retry time, when the
// effect stays in the outbox.
func (d *Deliverer) deliver(ctx context.Context, se store.Effect) (time.Time, bool) {
	var e Effect
	if err := json.Unmarshal(se.Payload, &e); err != nil {
		d.drop(ctx, se, e, fmt.Errorf("%w: undecodable effect: %v", chat.ErrPermanent, err))
		return time.Time{}, true
	}
	if e.Message.IdempotencyKey == "" {
		e.Message.IdempotencyKey = effectKey(e.Surface, se)
	}
	log := d.log.With("request_id", e.Request, "surface", e.Surface, "op", string(e.Op), "seq", se.Seq)
	if e.Op == OpExpand {
		return d.expand(ctx, log, se, e)
	}
	rt, ok := d.connectors[e.Surface]
	if !ok {
		d.drop(ctx, se, e, fmt.Errorf("%w: no connector for surface %q", chat.ErrPermanent, e.Surface))
		return time.Time{}, true
	}
	save, err := d.attempt(ctx, log, rt, se, e)
	if err == nil {
		err = d.store.Update(ctx, func(tx store.Tx) error {
			if save != nil {
				if err := save(tx); err != nil {
					return err
				}
			}
			return store.AckEffect(tx, se)
		})
		if err == nil {
			d.setDoubt(se.Seq, false)
			if d.OnDelivered != nil && !se.Created.IsZero() {
				d.OnDelivered(e.Surface, time.Since(se.Created))
			}
			return time.Time{}, true
		}
	}
	return d.failed(ctx, log, se, e, err)
}

// expand puts in the place of OpExpand effect se the effects it stands
// for, in one transaction, and reports false with the time to plan its
// thread again (now: the thread's effects changed).
func (d *Deliverer) expand(ctx context.Context, log *slog.Logger, se store.Effect, e Effect) (time.Time, bool) {
	var err error
	switch {
	case se.Span == 0: // not made by PrepareExpand: nothing reserved its parts' place
		err = fmt.Errorf("%w: an expand effect without a span", chat.ErrPermanent)
	case d.Expand == nil:
		err = errors.New("threads: expand: no expander")
	default:
		err = d.store.Update(ctx, func(tx store.Tx) error { return d.Expand(tx, se) })
	}
	if err == nil || errors.Is(err, store.ErrExpanded) { // ErrExpanded: by an earlier term
		return d.clock.Now(), false // its thread's effects changed: plan them again
	}
	return d.failed(ctx, log, se, e, err)
}

// failed handles an attempt of effect se that failed with err: a permanent
// failure drops the effect, any other backs it off (or waits for the
// platform's Retry-After), recorded and audited. It reports false, with the
// retry time, when the effect stays in the outbox.
func (d *Deliverer) failed(ctx context.Context, log *slog.Logger, se store.Effect, e Effect, err error) (time.Time, bool) {
	if errors.Is(err, chat.ErrPermanent) {
		d.drop(ctx, se, e, err)
		return time.Time{}, true
	}
	var ra *chat.RetryAfterError
	limited := errors.As(err, &ra)
	if !limited && e.Op != OpUpdate && e.Op != OpExpand {
		// The post may have gone out (a timeout, a lost answer, a failed
		// record): the next attempt looks for it first.
		d.setDoubt(se.Seq, true)
	}
	if ctx.Err() != nil {
		return time.Time{}, false
	}
	se.Attempts++
	backoff := min(minBackoff<<min(se.Attempts-1, 16), maxBackoff)
	if limited {
		backoff = ra.After // the platform said when: not sooner, not later
	}
	se.NotBefore = d.clock.Now().Add(backoff)
	se.LastError = err.Error()
	log.WarnContext(ctx, "delivery failed; will retry", "error", err, "attempt", se.Attempts, "retry_in", backoff)
	expanded := false
	uerr := d.store.Update(ctx, func(tx store.Tx) error {
		if e.Op == OpExpand {
			// An expansion whose outcome was unknown may have committed:
			// never put the effect back over its first part.
			ok, err := unexpanded(tx, se)
			if err != nil || !ok {
				expanded = err == nil
				return err
			}
		}
		if err := store.UpdateEffect(tx, se); err != nil {
			if isNotFound(err) { // coalesced away meanwhile
				d.setDoubt(se.Seq, false)
				return nil
			}
			return err
		}
		return audit.Append(tx, audit.Record{
			Time: d.clock.Now(), RequestID: e.Request, Actor: "system:outbox", Surface: e.Surface,
			Action: "delivery_failed", Detail: fmt.Sprintf("%s attempt %d: %v", e.Op, se.Attempts, err),
		})
	})
	if uerr != nil {
		log.ErrorContext(ctx, "recording delivery failure", "error", uerr)
	}
	if expanded { // its parts are there: no back-off
		return d.clock.Now(), false
	}
	return se.NotBefore, false
}

// attempt makes one delivery attempt of effect se (decoded: e) through rt
// and returns what to record with its ack. Each call to the platform (the
// lookup of a post in doubt included) comes right after the claims of rt's
// fences, with nothing between them (no store read): a deposed leader
// that is paused between the two is the only one that may still send, and
// the window is as small as one call.
func (d *Deliverer) attempt(ctx context.Context, log *slog.Logger, rt route, se store.Effect, e Effect) (func(store.Tx) error, error) {
	return d.send(ctx, rt, e, d.finder(ctx, log, rt, se, e))
}

// findFunc looks for the post of an effect in doubt (see finder).
type findFunc func(chat.Lookup) (chat.MessageRef, bool, error)

// finder returns how send looks for the post of effect se before it posts:
// through conn's Finder when se is in doubt, else not at all. A lookup that
// fails is logged and counts as not found (the effect is posted: at least
// once), except for a rate limit or the end of ctx, which delay the delivery
// (the lookup is made again at the next attempt).
func (d *Deliverer) finder(ctx context.Context, log *slog.Logger, rt route, se store.Effect, e Effect) findFunc {
	f, ok := rt.conn.(chat.Finder)
	if !ok || !d.inDoubt(se.Seq) {
		return func(chat.Lookup) (chat.MessageRef, bool, error) { return chat.MessageRef{}, false, nil }
	}
	return func(l chat.Lookup) (chat.MessageRef, bool, error) {
		l.Key, l.Since = e.Message.IdempotencyKey, se.Created
		if err := rt.claim(ctx); err != nil {
			return chat.MessageRef{}, false, err
		}
		ref, found, err := f.FindPosted(ctx, l)
		var ra *chat.RetryAfterError
		switch {
		case err != nil && (errors.As(err, &ra) || ctx.Err() != nil):
			return chat.MessageRef{}, false, err
		case err != nil:
			log.WarnContext(ctx, "looking for a post in doubt failed; posting it", "error", err, "key", l.Key)
			return chat.MessageRef{}, false, nil
		case found:
			log.InfoContext(ctx, "a post in doubt had gone out; recording it instead of posting again", "key", l.Key, "message", ref.ID)
		}
		return ref, found, nil
	}
}

// send performs the effect through rt and returns what to record with its
// ack; find first looks for a post in doubt.
func (d *Deliverer) send(ctx context.Context, rt route, e Effect, find findFunc) (func(store.Tx) error, error) {
	switch e.Op {
	case OpThread:
		return d.sendThread(ctx, rt, e, find)
	case OpReply:
		return d.sendReply(ctx, rt, e, find)
	case OpUpdate:
		return d.sendUpdate(ctx, rt, e)
	case OpDirect:
		return d.sendDirect(ctx, rt, e, find)
	}
	return nil, fmt.Errorf("%w: unknown op %q", chat.ErrPermanent, e.Op)
}

// sendThread posts the parent of e's request's thread, unless it was posted
// and recorded (never twice) or find finds it, and returns what to record.
func (d *Deliverer) sendThread(ctx context.Context, rt route, e Effect, find findFunc) (func(store.Tx) error, error) {
	var exists bool
	if err := d.store.View(ctx, func(tx store.Tx) error {
		_, err := ThreadRef(tx, e.Surface, e.Request)
		exists = err == nil
		if isNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		return nil, err
	}
	if exists {
		return nil, nil // the parent was posted and recorded: never post it again
	}
	mref, found, err := find(chat.Lookup{Channel: e.Channel})
	var tref chat.ThreadRef
	switch {
	case err != nil:
		return nil, err
	case found:
		tref = chat.ThreadRef{Surface: e.Surface, Channel: mref.Channel, ID: mref.ID}
	default:
		if err = rt.claim(ctx); err != nil {
			return nil, err
		}
		if tref, mref, err = rt.conn.StartThread(ctx, e.Channel, e.Message); err != nil {
			return nil, err
		}
	}
	return func(tx store.Tx) error {
		if err := saveThreadRef(tx, e.Request, tref); err != nil {
			return err
		}
		return saveMessageRef(tx, e.Surface, e.Save, mref)
	}, nil
}

// sendReply posts e in its request's thread; an outcome closes the live
// message(s) instead where this process streams one.
func (d *Deliverer) sendReply(ctx context.Context, rt route, e Effect, find findFunc) (func(store.Tx) error, error) {
	var tref chat.ThreadRef
	if err := d.store.View(ctx, func(tx store.Tx) error {
		var err error
		tref, err = ThreadRef(tx, e.Surface, e.Request)
		return err
	}); err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: %s has no thread on %s", chat.ErrPermanent, e.Request, e.Surface)
		}
		return nil, err
	}
	var forget func(store.Tx) error
	if e.Message.Kind == "final" && d.Live != nil {
		// The outcome closes the live message(s): it lands in the one
		// this process streams, else it is posted.
		var found bool
		var err error
		if _, found, forget, err = d.Live.Finish(ctx, e.Surface, e.Request, e.Message); err != nil || found {
			return forget, err
		}
	}
	return d.reply(ctx, rt, e, tref, find, forget)
}

// sendUpdate edits the recorded message e.Ref names.
func (d *Deliverer) sendUpdate(ctx context.Context, rt route, e Effect) (func(store.Tx) error, error) {
	var mref chat.MessageRef
	if err := d.store.View(ctx, func(tx store.Tx) error {
		var err error
		mref, err = MessageRef(tx, e.Surface, e.Ref)
		return err
	}); err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: no message %s on %s", chat.ErrPermanent, e.Ref, e.Surface)
		}
		return nil, err
	}
	if err := rt.claim(ctx); err != nil {
		return nil, err
	}
	return nil, rt.conn.Update(ctx, mref, e.Message)
}

// sendDirect sends e to its user directly (unless find finds it sent) and
// returns what to record.
func (d *Deliverer) sendDirect(ctx context.Context, rt route, e Effect, find findFunc) (func(store.Tx) error, error) {
	dm, ok := rt.conn.(chat.DirectMessenger)
	if !ok {
		return nil, fmt.Errorf("%w: %s cannot send direct messages", chat.ErrPermanent, e.Surface)
	}
	mref, found, err := find(chat.Lookup{User: e.User})
	if err == nil && !found {
		if err = rt.claim(ctx); err == nil {
			mref, err = dm.Direct(ctx, e.User, e.Message)
		}
	}
	if err != nil || e.Save == "" {
		return nil, err
	}
	return func(tx store.Tx) error { return saveMessageRef(tx, e.Surface, e.Save, mref) }, nil
}

// reply posts effect e in thread tref (unless find finds it posted) and
// returns what to record with its ack, with also (if set).
func (d *Deliverer) reply(ctx context.Context, rt route, e Effect, tref chat.ThreadRef, find findFunc, also func(store.Tx) error) (func(store.Tx) error, error) {
	mref, found, err := find(chat.Lookup{Thread: &tref})
	if err == nil && !found {
		if err = rt.claim(ctx); err == nil {
			mref, err = rt.conn.Reply(ctx, tref, e.Message)
		}
	}
	if err != nil {
		return nil, err
	}
	return func(tx store.Tx) error {
		if also != nil {
			if err := also(tx); err != nil {
				return err
			}
		}
		if e.Save == "" {
			return nil
		}
		return saveMessageRef(tx, e.Surface, e.Save, mref)
	}, nil
}

// drop removes an effect that can never be delivered, with an audit record.
func (d *Deliverer) drop(ctx context.Context, se store.Effect, e Effect, cause error) {
	d.setDoubt(se.Seq, false)
	d.log.ErrorContext(ctx, "dropping undeliverable effect", "request_id", e.Request, "seq", se.Seq, "error", cause)
	err := d.store.Update(ctx, func(tx store.Tx) error {
		if e.Op == OpExpand { // never what took its place
			if ok, err := unexpanded(tx, se); err != nil || !ok {
				return err
			}
		}
		if err := store.AckEffect(tx, se); err != nil {
			return err
		}
		return audit.Append(tx, audit.Record{
			Time: d.clock.Now(), RequestID: e.Request, Actor: "system:outbox", Surface: e.Surface,
			Action: "delivery_dropped", Detail: cause.Error(),
		})
	})
	if err != nil {
		d.log.ErrorContext(ctx, "recording dropped effect", "error", err)
	}
}
