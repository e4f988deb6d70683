package threads

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/store"
)

// ErrPermanent marks a delivery error that no retry can fix (the effect is
// dropped with an audit record).
var ErrPermanent = errors.New("permanent delivery error")

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
type Deliverer struct {
	store      store.Store
	connectors map[string]chat.Connector
	clock      clock.Clock
	log        *slog.Logger

	// OnDelivered, if set, is told of each effect delivered: its surface
	// and the time since it was enqueued (metrics). Set it before Run.
	OnDelivered func(surface string, latency time.Duration)
}

// NewDeliverer returns a Deliverer for the given connectors.
func NewDeliverer(s store.Store, c clock.Clock, log *slog.Logger, connectors ...chat.Connector) *Deliverer {
	m := map[string]chat.Connector{}
	for _, cn := range connectors {
		m[cn.Surface()] = cn
	}
	return &Deliverer{store: s, connectors: m, clock: c, log: log}
}

// Run delivers until ctx ends, woken by outbox notifications and back-off
// deadlines (no polling).
func (d *Deliverer) Run(ctx context.Context) error { return d.loop(ctx, false) }

// Flush delivers until the outbox is empty (nil) or ctx ends (an error
// saying how many effects are left): a graceful shutdown bounds it by its
// grace period. Effects held back (a coalesced edit, a retry after a
// failure or a 429) are waited for while ctx allows; when the earliest of
// them is due only after ctx's deadline, Flush gives up at once.
func (d *Deliverer) Flush(ctx context.Context) error { return d.loop(ctx, true) }

// loop is Run, or Flush when untilEmpty is set.
func (d *Deliverer) loop(ctx context.Context, untilEmpty bool) error {
	wake, cancel := d.store.Subscribe(store.TopicOutbox)
	defer cancel()
	for {
		if ctx.Err() != nil {
			if untilEmpty {
				return d.left(ctx, ctx.Err())
			}
			return nil
		}
		next, err := d.DeliverOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.ErrorContext(ctx, "outbox round failed", "error", err)
			next = d.clock.Now().Add(minBackoff)
		}
		if untilEmpty {
			if n, err := d.pending(ctx); err == nil && n == 0 {
				return nil
			}
			if dl, ok := ctx.Deadline(); ok && !next.IsZero() && next.After(dl) {
				return d.left(ctx, fmt.Errorf("the next is due at %s, after the deadline", next.Format(time.RFC3339Nano)))
			}
		}
		var timer *time.Timer
		var due <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(max(next.Sub(d.clock.Now()), time.Millisecond))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// pending counts the effects in the outbox (up to batchSize).
func (d *Deliverer) pending(ctx context.Context) (int, error) {
	var n int
	err := d.store.View(ctx, func(tx store.Tx) error {
		p, err := store.PendingEffects(tx, batchSize)
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

// DeliverOnce makes one delivery round over the pending effects and returns
// when the earliest backed-off effect is due (zero: none is waiting).
func (d *Deliverer) DeliverOnce(ctx context.Context) (time.Time, error) {
	var pending []store.Effect
	if err := d.store.View(ctx, func(tx store.Tx) error {
		var err error
		pending, err = store.PendingEffects(tx, batchSize)
		return err
	}); err != nil {
		return time.Time{}, fmt.Errorf("threads: outbox: %w", err)
	}
	now := d.clock.Now()
	var next time.Time
	queues := map[string][]store.Effect{}
	var order []string
	blocked := map[string]bool{}
	for _, e := range pending {
		if blocked[e.Queue] {
			continue
		}
		if e.NotBefore.After(now) {
			blocked[e.Queue] = true
			if next.IsZero() || e.NotBefore.Before(next) {
				next = e.NotBefore
			}
			continue
		}
		if _, ok := queues[e.Queue]; !ok {
			order = append(order, e.Queue)
		}
		queues[e.Queue] = append(queues[e.Queue], e)
	}
	sem := make(chan struct{}, parallelQueues)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, q := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(effects []store.Effect) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, e := range effects {
				retryAt, ok := d.deliver(ctx, e)
				if !ok {
					mu.Lock()
					if next.IsZero() || retryAt.Before(next) {
						next = retryAt
					}
					mu.Unlock()
					return // keep the thread's order: later effects wait
				}
			}
		}(queues[q])
	}
	wg.Wait()
	if len(pending) == batchSize {
		// More may be waiting behind this batch.
		return d.clock.Now(), nil
	}
	return next, nil
}

// deliver sends one effect. It reports false, with the retry time, when the
// effect stays in the outbox.
func (d *Deliverer) deliver(ctx context.Context, se store.Effect) (time.Time, bool) {
	var e Effect
	if err := json.Unmarshal(se.Payload, &e); err != nil {
		d.drop(ctx, se, e, fmt.Errorf("%w: undecodable effect: %v", ErrPermanent, err))
		return time.Time{}, true
	}
	log := d.log.With("request_id", e.Request, "surface", e.Surface, "op", string(e.Op), "seq", se.Seq)
	conn, ok := d.connectors[e.Surface]
	if !ok {
		d.drop(ctx, se, e, fmt.Errorf("%w: no connector for surface %q", ErrPermanent, e.Surface))
		return time.Time{}, true
	}
	save, err := d.send(ctx, conn, e)
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
			if d.OnDelivered != nil && !se.Created.IsZero() {
				d.OnDelivered(e.Surface, time.Since(se.Created))
			}
			return time.Time{}, true
		}
	}
	if errors.Is(err, ErrPermanent) {
		d.drop(ctx, se, e, err)
		return time.Time{}, true
	}
	if ctx.Err() != nil {
		return time.Time{}, false
	}
	se.Attempts++
	backoff := min(minBackoff<<min(se.Attempts-1, 16), maxBackoff)
	var ra *chat.RetryAfterError
	if errors.As(err, &ra) {
		backoff = ra.After // the platform said when: not sooner, not later
	}
	se.NotBefore = d.clock.Now().Add(backoff)
	se.LastError = err.Error()
	log.WarnContext(ctx, "delivery failed; will retry", "error", err, "attempt", se.Attempts, "retry_in", backoff)
	uerr := d.store.Update(ctx, func(tx store.Tx) error {
		if err := store.UpdateEffect(tx, se); err != nil {
			if isNotFound(err) { // coalesced away meanwhile
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
	return se.NotBefore, false
}

// send performs the effect and returns what to record with its ack.
func (d *Deliverer) send(ctx context.Context, conn chat.Connector, e Effect) (func(store.Tx) error, error) {
	switch e.Op {
	case OpThread:
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
		tref, mref, err := conn.StartThread(ctx, e.Channel, e.Message)
		if err != nil {
			return nil, err
		}
		return func(tx store.Tx) error {
			if err := saveThreadRef(tx, e.Request, tref); err != nil {
				return err
			}
			return saveMessageRef(tx, e.Surface, e.Save, mref)
		}, nil
	case OpReply:
		var tref chat.ThreadRef
		if err := d.store.View(ctx, func(tx store.Tx) error {
			var err error
			tref, err = ThreadRef(tx, e.Surface, e.Request)
			return err
		}); err != nil {
			if isNotFound(err) {
				return nil, fmt.Errorf("%w: %s has no thread on %s", ErrPermanent, e.Request, e.Surface)
			}
			return nil, err
		}
		mref, err := conn.Reply(ctx, tref, e.Message)
		if err != nil || e.Save == "" {
			return nil, err
		}
		return func(tx store.Tx) error { return saveMessageRef(tx, e.Surface, e.Save, mref) }, nil
	case OpUpdate:
		var mref chat.MessageRef
		if err := d.store.View(ctx, func(tx store.Tx) error {
			var err error
			mref, err = MessageRef(tx, e.Surface, e.Ref)
			return err
		}); err != nil {
			if isNotFound(err) {
				return nil, fmt.Errorf("%w: no message %s on %s", ErrPermanent, e.Ref, e.Surface)
			}
			return nil, err
		}
		return nil, conn.Update(ctx, mref, e.Message)
	case OpDirect:
		dm, ok := conn.(chat.DirectMessenger)
		if !ok {
			return nil, fmt.Errorf("%w: %s cannot send direct messages", ErrPermanent, e.Surface)
		}
		mref, err := dm.Direct(ctx, e.User, e.Message)
		if err != nil || e.Save == "" {
			return nil, err
		}
		return func(tx store.Tx) error { return saveMessageRef(tx, e.Surface, e.Save, mref) }, nil
	}
	return nil, fmt.Errorf("%w: unknown op %q", ErrPermanent, e.Op)
}

// drop removes an effect that can never be delivered, with an audit record.
func (d *Deliverer) drop(ctx context.Context, se store.Effect, e Effect, cause error) {
	d.log.ErrorContext(ctx, "dropping undeliverable effect", "request_id", e.Request, "seq", se.Seq, "error", cause)
	err := d.store.Update(ctx, func(tx store.Tx) error {
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
