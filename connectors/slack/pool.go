package slack

import (
	"context"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// job is an acknowledged inbound event waiting for the core.
type job struct {
	h  chat.Handler
	ev chat.Event
}

// pool hands acknowledged events to the core off the acknowledging
// goroutine: a fixed number of workers, each with a bounded queue. Events of
// one thread (or one card) always go to the same worker, so they reach the
// core in the order Slack sent them.
type pool struct {
	shards  []chan job
	log     *slog.Logger
	respond func(ctx context.Context, ev chat.Event, r chat.Response)

	mu      sync.RWMutex
	running bool
}

func newPool(workers, queue int, log *slog.Logger, respond func(context.Context, chat.Event, chat.Response)) *pool {
	p := &pool{log: log, respond: respond}
	per := max(queue/workers, 1)
	for range workers {
		p.shards = append(p.shards, make(chan job, per))
	}
	return p
}

// submit queues ev for h without blocking. It reports false when the
// event's queue is full or the pool is not running (before Run, after it, and
// on an HA follower, whose webhooks are served but whose connectors do not
// run): the caller must then not acknowledge the event, so that Slack
// delivers it again.
func (p *pool) submit(h chat.Handler, ev chat.Event) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.running {
		p.log.Info("event refused: the connector is not running here (not the leader?); Slack will redeliver it",
			"kind", string(ev.Kind), "event_id", ev.ID)
		return false
	}
	select {
	case p.shards[p.shard(ev)] <- job{h: h, ev: ev}:
		return true
	default:
		p.log.Warn("inbound queue full; event left unacknowledged for Slack to redeliver",
			"kind", string(ev.Kind), "event_id", ev.ID, "channel", ev.Channel)
		return false
	}
}

func (p *pool) shard(ev chat.Event) int {
	h := fnv.New32a()
	switch {
	case ev.Click != nil:
		h.Write([]byte(ev.Click.BlockID))
	case ev.Thread != nil:
		h.Write([]byte(ev.Channel + "/" + ev.Thread.ID))
	default:
		h.Write([]byte(ev.Channel))
	}
	return int(h.Sum32() % uint32(len(p.shards)))
}

// start runs the workers until the returned stop is called. stop refuses
// new events, lets the workers handle what is queued (acknowledged events
// would be lost otherwise) for up to drainGrace, and returns when they have.
func (p *pool) start(ctx context.Context) (stop func()) {
	p.mu.Lock()
	p.running = true
	p.mu.Unlock()
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for _, q := range p.shards {
		wg.Go(func() { p.work(hctx, q, quit) })
	}
	return func() {
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
		close(quit)
		t := time.AfterFunc(drainGrace, cancel)
		wg.Wait()
		t.Stop()
		cancel()
	}
}

func (p *pool) work(ctx context.Context, q chan job, quit <-chan struct{}) {
	for {
		select {
		case j := <-q:
			p.handle(ctx, j)
		case <-quit:
			for {
				select {
				case j := <-q:
					p.handle(ctx, j)
				default:
					return
				}
			}
		}
	}
}

func (p *pool) handle(ctx context.Context, j job) {
	ctx, cancel := context.WithTimeout(ctx, handleTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			p.log.ErrorContext(ctx, "handler panicked", "kind", string(j.ev.Kind), "event_id", j.ev.ID, "panic", v)
		}
	}()
	resp := j.h.Handle(ctx, j.ev)
	p.respond(ctx, j.ev, resp)
}
