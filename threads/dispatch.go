package threads

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/roombridge/roombridge/store"
)

// round is what one reading of the outbox found: the threads (queues)
// ready to deliver, the threads that exist first (answersFirst), each
// group in the order of its oldest effect, each thread with its effects in
// order.
type round struct {
	order  []string
	queues map[string][]store.Effect
	parent map[string]bool // the threads whose next effect posts their parent
	next   time.Time       // when the earliest held-back thread is due (zero: none)
	full   bool            // the batch was full: more may wait behind it
}

// plan reads the pending effects (up to batchSize) and groups the ready
// ones by thread. It leaves out the threads in busy (a delivery of theirs
// is under way), those held until later in held (a failure the store could
// not record), and each thread whose first effect is backed off (a retry
// after a failure or a 429, a coalesced edit): a thread's effects go out in
// order, so the ones behind it wait too.
func (d *Deliverer) plan(ctx context.Context, busy map[string]bool, held map[string]time.Time, run answerRun) (round, error) {
	var pending []store.Effect
	if err := d.store.View(ctx, func(tx store.Tx) error {
		var err error
		pending, err = d.pendingFx.Pending(tx, batchSize)
		return err
	}); err != nil {
		return round{}, fmt.Errorf("threads: outbox: %w", err)
	}
	d.keepOps(pending)
	d.markHeads(pending)
	now := d.clock.Now()
	r := round{queues: map[string][]store.Effect{}, full: len(pending) == batchSize}
	later := func(t time.Time) {
		if r.next.IsZero() || t.Before(r.next) {
			r.next = t
		}
	}
	blocked := map[string]bool{}
	for _, e := range pending {
		switch {
		case blocked[e.Queue] || busy[e.Queue]:
			continue
		case held[e.Queue].After(now):
			blocked[e.Queue] = true
			later(held[e.Queue])
			continue
		case e.NotBefore.After(now):
			blocked[e.Queue] = true
			later(e.NotBefore)
			continue
		}
		if _, ok := r.queues[e.Queue]; !ok {
			r.order = append(r.order, e.Queue)
		}
		r.queues[e.Queue] = append(r.queues[e.Queue], e)
	}
	d.answersFirst(&r, run)
	return r, nil
}

// answersInARow is how many threads that exist answersFirst puts before
// a waiting new thread's parent: the connectors' lines take at most as
// many posts into existing threads in a row while a parent waits.
const answersInARow = 2

// answersFirst puts the threads that exist (their next effect is a reply,
// an edit, a direct message) before the threads still to be posted, but at
// most answersInARow of them in a row while one still to be posted waits,
// counting the run of them the workers have started already (run); each
// group keeps the order of its oldest effect. In a burst of asks into one
// channel an answer does not wait for every other thread's new parent, and
// with more threads answering than there are workers a new parent still
// gets the next free one after two answers. (The connectors put such posts
// ahead in the channel's line the same way.)
func (d *Deliverer) answersFirst(r *round, run answerRun) {
	var answers, parents []string
	r.parent = map[string]bool{}
	d.mu.Lock()
	for _, q := range r.order {
		if op, ok := d.opLocked(r.queues[q][0]); ok && op == OpThread {
			parents = append(parents, q)
			r.parent[q] = true
		} else {
			answers = append(answers, q)
		}
	}
	d.mu.Unlock()
	order := r.order[:0]
	n := max(0, answersInARow-int(run))
	for len(answers) > 0 || len(parents) > 0 {
		n = min(n, len(answers))
		order, answers = append(order, answers[:n]...), answers[n:]
		if len(parents) > 0 {
			order, parents = append(order, parents[0]), parents[1:]
		}
		n = answersInARow
	}
	r.order = order
}

// answerRun counts the threads that exist the workers started in a row
// since they last started a thread still to be posted (answersFirst).
type answerRun int

// started counts the start of a thread (parent: one still to be posted).
func (n *answerRun) started(parent bool) {
	if parent {
		*n = 0
	} else {
		*n++
	}
}

// deliverQueue delivers one thread's effects in order. When one stays in
// the outbox it stops, keeping the thread's order (later effects wait),
// and returns when that one is due again; zero when all went out.
func (d *Deliverer) deliverQueue(ctx context.Context, effects []store.Effect) time.Time {
	for _, e := range effects {
		if retryAt, ok := d.deliver(ctx, e); !ok {
			return retryAt
		}
	}
	return time.Time{}
}

// queueDone is a thread's delivery ending, for dispatch.
type queueDone struct {
	queue   string
	retryAt time.Time
}

// dispatch is Run: threads are delivered to by up to parallelQueues
// workers, each taking one thread's ready effects. A thread that is slow
// (paced by its surface's rate limit, backed off, a slow platform) holds
// its own worker only: the other threads' effects, on every surface, go
// out meanwhile, and each worker's end starts the next ready thread, in
// the order of its oldest effect. It returns when ctx ends and every
// worker has stopped (a term's deliveries never overlap the next term's).
func (d *Deliverer) dispatch(ctx context.Context) error {
	wake, cancel := d.store.Subscribe(store.TopicOutbox)
	defer cancel()
	busy := map[string]bool{}
	held := map[string]time.Time{}
	var run answerRun
	done := make(chan queueDone, parallelQueues)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		r, err := d.plan(ctx, busy, held, run)
		next := r.next
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			d.log.ErrorContext(ctx, "outbox round failed", "error", err)
			next = d.clock.Now().Add(minBackoff)
		}
		started := false
		for _, q := range r.order {
			if len(busy) == parallelQueues {
				break // the rest start as workers end
			}
			busy[q], started = true, true
			run.started(r.parent[q])
			wg.Add(1)
			go func(q string, effects []store.Effect) {
				defer wg.Done()
				done <- queueDone{queue: q, retryAt: d.deliverQueue(ctx, effects)}
			}(q, r.queues[q])
		}
		if r.full && started && len(busy) < parallelQueues {
			next = d.clock.Now() // more may be waiting behind this batch
		}
		if qd, ok := d.wait(ctx, wake, done, next); ok {
			d.ended(qd, busy, held)
		}
		for drained := false; !drained; {
			select {
			case qd := <-done:
				d.ended(qd, busy, held)
			default:
				drained = true
			}
		}
	}
	return nil
}

// ended records a worker's end: its thread is free, and held until its
// retry time if an effect of it stayed in the outbox.
func (d *Deliverer) ended(qd queueDone, busy map[string]bool, held map[string]time.Time) {
	delete(busy, qd.queue)
	delete(held, qd.queue)
	if !qd.retryAt.IsZero() {
		held[qd.queue] = qd.retryAt
	}
}

// wait blocks until ctx ends, an effect is enqueued, a worker ends (its
// end is returned) or next comes (zero: no deadline).
func (d *Deliverer) wait(ctx context.Context, wake <-chan struct{}, done <-chan queueDone, next time.Time) (queueDone, bool) {
	var due <-chan time.Time
	if !next.IsZero() {
		timer := time.NewTimer(max(next.Sub(d.clock.Now()), time.Millisecond))
		defer timer.Stop()
		due = timer.C
	}
	select {
	case <-ctx.Done():
	case <-wake:
	case <-due:
	case qd := <-done:
		return qd, true
	}
	return queueDone{}, false
}
