package feishu

import (
	"context"
	"sync/atomic"
	"time"

	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/handled"
)

// drainGrace bounds how long the workers go on handling queued events
// once the last Run is stopping (some may be acknowledged already, clicks
// whose ack budget ran out: they would be lost otherwise); then the
// handlers' contexts end.
const drainGrace = 5 * time.Second

// answeredKeep is how long the connector remembers an event the core
// answered (internal/handled): Feishu pushes an event again for about 7 h
// (15 s, 5 min, 1 h, 6 h after).
const answeredKeep = 8 * time.Hour

// job is an inbound event waiting in its lane for the core. The worker that
// handles it hands the core's answer to the caller waiting in call, or to
// late once the caller has stopped waiting (gaveUp: the ack budget ran out).
type job struct {
	h       chat.Handler
	ev      chat.Event
	answer  chan handled.Answer // buffered: the core's answer
	decided chan struct{}       // closed once the caller has stopped waiting
	gaveUp  atomic.Bool         // set before decided is closed
	late    func(handled.Answer)
}

// call queues ev for h in its lane (chat.Event.Lane) and waits for the core's
// answer until the ack budget since arrived runs out. If it runs out, call
// returns done=false: the core handles ev afterwards (nothing is
// cancelled) and late gets its answer. An event that cannot be queued (no
// Run is left, or the queue is full) gets Retry, so that it is answered
// with an error and Feishu delivers it again: never dropped unanswered. A
// redelivery of an event the core answered already gets that answer
// without the core (handled.Answer.Repeat).
func (c *Connector) call(ctx context.Context, h chat.Handler, ev chat.Event, arrived time.Time, late func(handled.Answer)) (a handled.Answer, done bool) {
	j := &job{h: h, ev: ev, answer: make(chan handled.Answer, 1), decided: make(chan struct{}), late: late}
	if !c.submit(ctx, j) {
		return handled.Answer{Response: chat.Response{Retry: true}}, true
	}
	t := time.NewTimer(time.Until(arrived.Add(c.opts.AckBudget)))
	defer t.Stop()
	defer close(j.decided)
	select {
	case a := <-j.answer:
		return a, true
	case <-t.C:
		j.gaveUp.Store(true)
		return handled.Answer{}, false
	}
}

// submit queues j behind the events of its lane. It refuses (reporting
// false) once no Run is left, and when the queue is full. It holds trackMu,
// so that nothing is queued after the last Run's decrement of running: its
// workers drain the queue and return, and a job queued later would wait
// for no one.
func (c *Connector) submit(ctx context.Context, j *job) bool {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	if c.running.Load() == 0 {
		c.log.InfoContext(ctx, "feishu: event refused: the connector is stopping; Feishu delivers it again",
			"event_id", j.ev.ID, "kind", string(j.ev.Kind))
		return false
	}
	if !c.queue.Add(j.ev.Lane(), j) {
		c.log.WarnContext(ctx, "feishu: inbound queue full; event answered with an error for Feishu to deliver it again",
			"event_id", j.ev.ID, "kind", string(j.ev.Kind), "queue", c.opts.Queue)
		return false
	}
	return true
}

// serve counts one more Run and starts its workers on the queue. The
// returned stop ends this Run's share: once no Run is left events are
// refused (Retry: Feishu delivers them again), what is queued is handled
// (for up to drainGrace, then the handlers' contexts end), and stop returns
// when the workers, the late answers and the notices are done.
func (c *Connector) serve(ctx context.Context) (stop func()) {
	c.running.Add(1)
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		c.queue.Run(c.opts.Workers, quit, func(j *job) { c.handle(hctx, j) })
	}()
	return func() {
		c.trackMu.Lock()
		c.running.Add(-1) // nothing is queued or counted after the last Run's
		c.trackMu.Unlock()
		close(quit)
		t := time.AfterFunc(drainGrace, cancel)
		<-done
		t.Stop()
		cancel()
		c.wg.Wait()
	}
}

// handle passes j's event to the core (on a worker) and its answer to j's
// caller, or to j.late if the caller answered Feishu without it.
func (c *Connector) handle(ctx context.Context, j *job) {
	r := c.handleOne(ctx, j)
	j.answer <- r
	<-j.decided
	if j.gaveUp.Load() {
		j.late(r)
	}
}

// handleOne is the core's answer to j's event within handlerTimeout (the
// recorded one for a redelivery of an event it answered: c.answered); a
// panic of the core's is Retry (Feishu delivers the event again).
func (c *Connector) handleOne(ctx context.Context, j *job) (a handled.Answer) {
	ctx, cancel := context.WithTimeout(ctx, handlerTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			c.log.ErrorContext(ctx, "feishu: handler panicked", "event_id", j.ev.ID, "kind", string(j.ev.Kind), "panic", v)
			a = handled.Answer{Response: chat.Response{Retry: true}}
		}
	}()
	a = c.answered.Handle(ctx, j.h, j.ev)
	if a.Repeat {
		c.log.InfoContext(ctx, "feishu: redelivered event answered as before, without the core", "event_id", j.ev.ID,
			"kind", string(j.ev.Kind), "told_now", a.Tell)
	}
	return a
}

// track counts one more goroutine that outlives its event (a notice) in
// c.wg, unless no Run is left (it is stopping, and waits for those it
// counted): it reports whether it did.
func (c *Connector) track() bool {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	if c.running.Load() == 0 {
		return false
	}
	c.wg.Add(1)
	return true
}

// notice tells a person why the bridge refused their message (or answers
// their command), as a reply to it (Feishu has no ephemeral text message).
// It sends in the background, so the event's ack never waits for the rate
// limiter, and records how the send ended (c.answered.Told): of an event's
// deliveries (the late answer of one whose ack budget ran out, then its
// redelivery) one tells it, and a later one again if that send failed. The
// uuid derived from the event ID also makes Feishu drop a repeat within
// the hour, across restarts.
func (c *Connector) notice(chatID, msgID, eventID, text string) {
	content, err := noticeContent(text)
	if err != nil {
		c.answered.Told(eventID, true) // cannot be told
		return
	}
	key := ""
	if eventID != "" {
		key = "notice:" + eventID
	}
	if !c.track() {
		c.answered.Told(eventID, false)
		c.log.Info("feishu: refusal notice not sent: the connector is stopping", "event_id", eventID)
		return
	}
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), handlerTimeout)
		defer cancel()
		_, err := c.reply(ctx, chatID, msgID, larkim.MsgTypeText, content, key, false)
		c.answered.Told(eventID, err == nil)
		if err != nil {
			c.log.WarnContext(ctx, "feishu: refusal notice not sent; a redelivery of the event tells it", "event_id", eventID, "error", err)
		}
	}()
}
