package slack

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/handled"
	"github.com/roombridge/roombridge/internal/lanes"
)

// job is an inbound event waiting for the core. done, if not nil, is closed
// once the core's Handle for it has returned (or panicked); retry, set
// before, tells that it failed on our side (chat.Response.Retry, a panic).
type job struct {
	h     chat.Handler
	ev    chat.Event
	done  chan struct{}
	retry *bool
}

// pool hands inbound events to the core off the receiving goroutine: a
// fixed number of workers sharing one bounded queue. Events of one thread
// (or one card) reach the core one after the other, in the order Slack sent
// them (chat.Event.Lane); the others, top-level mentions above all (each starts its
// own thread), are handled at the same time, so their commits share the
// store's group commit instead of each waiting for the previous fsync. A
// delivery is acknowledged to Slack once the core has handled its events;
// one whose ack budget runs out first is left for Slack to deliver again,
// unless it is a click (delivery.wait). A redelivery of an event the core
// has answered (its first delivery was left unacknowledged) is answered
// from the record (answered) without the core: acknowledged, and its
// answer told only if no delivery has told it.
type pool struct {
	queue    *lanes.Lanes[job]
	workers  int
	log      *slog.Logger
	budget   time.Duration
	answered *handled.Set
	respond  func(ctx context.Context, ev chat.Event, r chat.Response) error

	mu      sync.RWMutex
	running bool // events are accepted
	working bool // workers run: a queued event's done is closed once handled
}

func newPool(workers, queue int, budget time.Duration, answered *handled.Set, log *slog.Logger,
	respond func(context.Context, chat.Event, chat.Response) error) *pool {
	return &pool{queue: lanes.New[job](queue), workers: workers, log: log, budget: budget, answered: answered, respond: respond}
}

// delivery is one delivery from Slack (a webhook request or a Socket Mode
// envelope) whose events are queued for the core.
type delivery struct {
	p       *pool
	arrived time.Time
	evs     []chat.Event
	done    []chan struct{}
	retry   []*bool
}

// submit queues evs (the events of one delivery that arrived at arrived),
// in order, for h without blocking. It reports false when an event's queue is
// full or the pool is not running (before Run, after it, and on an HA
// follower, whose webhooks are served but whose connectors do not run): the
// caller must then not acknowledge the delivery, so that Slack delivers it
// again (the core dedupes the events queued before the refusal).
func (p *pool) submit(h chat.Handler, arrived time.Time, evs ...chat.Event) (*delivery, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	d := &delivery{p: p, arrived: arrived, evs: evs}
	for _, ev := range evs {
		if !p.running {
			p.log.Info("event refused: the connector is not running here (not the leader?); Slack will redeliver it",
				"kind", string(ev.Kind), "event_id", ev.ID)
			return nil, false
		}
		j := job{h: h, ev: ev, retry: new(bool)}
		if p.working {
			j.done = make(chan struct{})
		}
		if !p.queue.Add(ev.Lane(), j) {
			p.log.Warn("inbound queue full; event left unacknowledged for Slack to redeliver",
				"kind", string(ev.Kind), "event_id", ev.ID, "channel", ev.Channel)
			return nil, false
		}
		d.done, d.retry = append(d.done, j.done), append(d.retry, j.retry)
	}
	return d, true
}

// failed reports whether the core failed on our side (chat.Response.Retry,
// a panic) for an event of d it has handled.
func (d *delivery) failed() bool {
	for i, done := range d.done {
		if isDone(done) && *d.retry[i] {
			return true
		}
	}
	return false
}

// wait returns once the core has handled every event of d (it has stored
// them: the core dedupes and records an event in one transaction), or the
// ack budget since d arrived has run out, or ctx ends. It reports whether d
// is to be acknowledged. It is not (the caller answers 503 or leaves the
// envelope without its ack, for Slack to deliver it again) when ctx ended
// first, when the core failed on our side for one of its events, or when the
// budget ran out on an event Slack delivers again (see late).
func (d *delivery) wait(ctx context.Context) (ack bool) {
	t := time.NewTimer(time.Until(d.arrived.Add(d.p.budget)))
	defer t.Stop()
	for i, done := range d.done {
		if done == nil {
			continue // no worker runs to close it
		}
		select {
		case <-done:
		case <-t.C:
			return d.late(ctx, i)
		case <-ctx.Done():
			return false
		}
	}
	return !d.failed()
}

// late is wait's answer when the budget ran out on the events of d from i
// on, and logs each that the core has not handled yet. Their handling goes
// on either way. An event Slack delivers again (a mention, a reply: all but
// clicks) keeps d unacknowledged: Slack delivers it again (Events API: with
// X-Slack-Retry-Num; Socket Mode: with retry_attempt), the redelivery takes
// the same lane (chat.Event.Lane), so it follows this handling, and the core dedupes
// it by event ID. A click, which Slack never delivers again, is acknowledged
// all the same (Slack wants its answer within 3 s) and handled afterwards:
// a crash before the core stored it loses it.
func (d *delivery) late(ctx context.Context, i int) (ack bool) {
	ack = !d.failed()
	var pending []chat.Event
	for k, ev := range d.evs[i:] {
		if isDone(d.done[i+k]) {
			continue
		}
		pending = append(pending, ev)
		if redelivered(ev) {
			ack = false
		}
	}
	msg := "ack budget ran out: left unacknowledged for Slack to deliver again"
	if ack {
		msg = "ack budget ran out: acknowledged before the core stored it (Slack does not deliver a click again)"
	}
	for _, ev := range pending {
		d.p.log.WarnContext(ctx, msg, "kind", string(ev.Kind), "event_id", ev.ID, "channel", ev.Channel, "budget", d.p.budget)
	}
	return ack
}

// redelivered reports whether Slack delivers ev again when it is not
// acknowledged: every event but a click (interactivity payloads are not
// retried).
func redelivered(ev chat.Event) bool { return ev.Kind != chat.Click }

// isDone reports whether done is closed (nil: unknown, false).
func isDone(done chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// start runs the workers until the returned stop is called. stop refuses
// new events, lets the workers handle what is queued (a click among it may be
// acknowledged already, its budget run out: it would be lost otherwise) for
// up to drainGrace, and returns when they have.
func (p *pool) start(ctx context.Context) (stop func()) {
	p.mu.Lock()
	p.running, p.working = true, true
	p.mu.Unlock()
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.queue.Run(p.workers, quit, func(j job) { p.handle(hctx, j) }) })
	return func() {
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
		close(quit)
		t := time.AfterFunc(drainGrace, cancel)
		wg.Wait()
		t.Stop()
		cancel()
		p.mu.Lock()
		p.working = false
		p.mu.Unlock()
	}
}

// handle passes j's event to the core (unless the core answered it already:
// a redelivery), marks it handled (its delivery may be acknowledged), then
// tells the actor a refusal or an answer, once per event.
func (p *pool) handle(ctx context.Context, j job) {
	ctx, cancel := context.WithTimeout(ctx, handleTimeout)
	defer cancel()
	done := j.done
	defer func() {
		if done != nil {
			*j.retry = true
			close(done) // Handle panicked
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "handler panicked", "kind", string(j.ev.Kind), "event_id", j.ev.ID, "panic", v)
		}
	}()
	a := p.answered.Handle(ctx, j.h, j.ev)
	*j.retry = a.Retry
	if done != nil {
		close(done)
		done = nil
	}
	if a.Repeat {
		p.log.InfoContext(ctx, "redelivered event acknowledged: the core answered it before", "kind", string(j.ev.Kind),
			"event_id", j.ev.ID, "told_now", a.Tell)
	}
	if a.Tell {
		p.answered.Told(j.ev.ID, p.respond(ctx, j.ev, a.Response) == nil)
	}
}
