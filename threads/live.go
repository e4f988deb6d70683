package threads

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// bucketStreams records the live messages that are open: surface/request/
// message ID → chat.MessageRef. One write when a live message opens, one
// (with the final answer's ack) when it closes; none per delta.
const bucketStreams = "live_streams"

// Interrupted is the text a live message open at a restart is closed with.
const Interrupted = "(interrupted: the bridge restarted while this was written; the answer follows)"

// Live shows the requests' work in their threads while it happens: the
// answer as it is written, what the agent weighs, the tool timeline. It is
// an agents.Live. Deltas are coalesced in memory, per request, and sent at
// the surface's pace (chat.Streamer.StreamPace) by one sender per live
// message: a delta costs an append to a buffer, never a store write. Only
// the live message's reference is durable (bucketStreams), so that the
// final answer, delivered by the outbox exactly once, closes it (Finish),
// and a restart closes the ones it finds open (Recover). Surfaces whose
// connector is no chat.Streamer show nothing live.
type Live struct {
	th     *Threads
	store  store.Store
	clock  clock.Clock
	log    *slog.Logger
	routes map[string]route

	mu      sync.Mutex
	ctx     context.Context // Run's; nil: not running (nothing is sent)
	streams map[string]*stream
	// finished: the live message each request's outcome closed, until the
	// outbox records it (a retry of the delivery closes it again with it).
	finished map[string]chat.MessageRef
	wg       sync.WaitGroup
	// texts: the live text of each request being written, for Watch.
	texts liveTexts
}

// NewLive returns a Live over the connectors (fenced or not: a live
// message's opening, every update and its closing are claimed like any
// delivery).
func NewLive(th *Threads, s store.Store, c clock.Clock, log *slog.Logger, connectors ...chat.Connector) *Live {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := map[string]route{}
	for _, cn := range connectors {
		if _, ok := routeOf(cn).conn.(chat.Streamer); ok {
			m[cn.Surface()] = routeOf(cn)
		}
	}
	return &Live{th: th, store: s, clock: c, log: log, routes: m, streams: map[string]*stream{}, finished: map[string]chat.MessageRef{}}
}

// Run closes the live messages a previous process (or leader) left open
// (Recover), then serves until ctx ends; the senders stop with it.
func (l *Live) Run(ctx context.Context) error {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	if err := l.Recover(ctx); err != nil && ctx.Err() == nil {
		l.log.ErrorContext(ctx, "closing interrupted live messages", "error", err)
	}
	<-ctx.Done()
	l.mu.Lock()
	l.ctx = nil
	streams := make([]*stream, 0, len(l.streams))
	for _, s := range l.streams {
		streams = append(streams, s)
	}
	l.mu.Unlock()
	// The senders stop; the live messages stay known, so that the outcomes
	// the outbox still delivers (a graceful stop flushes it) close them.
	for _, s := range streams {
		s.stop()
	}
	l.wg.Wait()
	return nil
}

// Running reports whether Run serves (deltas are shown only then).
func (l *Live) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx != nil
}

// stream returns r's live stream, starting it (nil: r's thread is on no
// streaming surface, or Live is not running).
func (l *Live) stream(r *requests.Request) *stream {
	id := r.ID.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return nil
	}
	if s, ok := l.streams[id]; ok && !s.stopped() {
		return s
	}
	surface, _, ok := l.th.Place(r)
	if !ok {
		return nil
	}
	rt, ok := l.routes[surface]
	if !ok {
		return nil
	}
	s := newStream(l, id, surface, rt)
	if user, ok := strings.CutPrefix(r.Requester, surface+":"); ok {
		s.recipient = user
	}
	l.streams[id] = s
	l.wg.Add(1)
	ctx := l.ctx // read under l.mu: Run clears it when it ends
	go func() {
		defer l.wg.Done()
		s.send(ctx)
	}()
	return s
}

// Delta implements agents.Live.
func (l *Live) Delta(r *requests.Request, text string) {
	l.texts.add(r.ID.String(), text)
	if s := l.stream(r); s != nil {
		s.add(func() { s.text.WriteString(text) })
	}
}

// Thinking implements agents.Live.
func (l *Live) Thinking(r *requests.Request, text string) {
	if s := l.stream(r); s != nil {
		s.add(func() { s.thinking = text })
	}
}

// Tool implements agents.Live: a step of the timeline, with how long it
// took once it ended.
func (l *Live) Tool(r *requests.Request, phase, name string) {
	s := l.stream(r)
	if s == nil {
		return
	}
	now := l.clock.Now()
	s.add(func() { s.step(now, phase, name) })
}

// Said implements agents.Live: the text so far was posted as a message, so
// the live text starts anew.
func (l *Live) Said(r *requests.Request) {
	l.texts.reset(r.ID.String())
	if s := l.stream(r); s != nil {
		s.add(s.newSegment)
	}
}

// Watch subscribes to the live text of request (its ID) as the agent writes
// it, whatever surface its thread is on and whether or not Run serves: the
// channel gets the whole text so far at once (if any), then after each
// change the whole text again (the newest only: a slow reader skips). It
// is in memory, in the process that runs the turn. cancel ends the
// subscription (the channel is not closed).
func (l *Live) Watch(request string) (text <-chan string, cancel func()) {
	return l.texts.watch(request)
}

// Ended implements agents.Live: the turn is over (its answer, if any, is
// stored now), so its live text is forgotten.
func (l *Live) Ended(r *requests.Request) { l.texts.forget(r.ID.String()) }

// Finish closes request's live messages on surface with m, the final
// answer, as the outbox delivers it: the one this process streams gets m as
// its whole text (and so shows exactly the stored answer); any other found
// open (left by an earlier turn cut by a restart) is closed as interrupted.
// It reports the message the answer is in (found false: none was open, post
// m as usual) and what to record with the effect's ack: the live messages
// are forgotten in the same transaction, so a crash before it closes them
// again (CloseStream may be repeated), never as interrupted after the
// answer.
func (l *Live) Finish(ctx context.Context, surface, request string, m chat.Message) (chat.MessageRef, bool, func(store.Tx) error, error) {
	rt, ok := l.routes[surface]
	if !ok {
		return chat.MessageRef{}, false, nil, nil
	}
	l.mu.Lock()
	s := l.streams[request]
	delete(l.streams, request)
	live := l.finished[request]
	l.mu.Unlock()
	if s != nil {
		live = s.stop() // its sender is done: nothing is sent after the close
	}
	refs, err := l.open(ctx, surface+"/"+request+"/")
	if err != nil {
		return chat.MessageRef{}, false, nil, err
	}
	conn := rt.conn.(chat.Streamer)
	var found bool
	var in chat.MessageRef
	for _, o := range refs {
		text := Interrupted
		switch {
		case live.ID == "" || o.ref != live:
		case !fitsLive(conn, m.Text):
			text = LongAnswer // found stays false: the answer is posted as a message of its own
		default:
			text, in, found = m.Text, o.ref, true
		}
		if err := rt.claim(ctx); err != nil {
			return chat.MessageRef{}, false, nil, err
		}
		if err := conn.CloseStream(ctx, o.ref, chat.Message{Request: request, Kind: m.Kind, Text: text}); err != nil {
			return chat.MessageRef{}, false, nil, fmt.Errorf("threads: close live message %s: %w", o.ref.ID, err)
		}
	}
	if found {
		l.mu.Lock()
		l.finished[request] = in
		l.mu.Unlock()
	}
	forget := func(tx store.Tx) error {
		l.mu.Lock()
		delete(l.finished, request) // fn may run again: deleting is idempotent
		l.mu.Unlock()
		for _, o := range refs {
			if err := tx.Delete(bucketStreams, o.key); err != nil {
				return err
			}
		}
		return nil
	}
	return in, found, forget, nil
}

// openRef is a recorded live message.
type openRef struct {
	key string
	ref chat.MessageRef
}

// open reads the recorded live messages whose keys start with prefix.
func (l *Live) open(ctx context.Context, prefix string) ([]openRef, error) {
	var refs []openRef
	err := l.store.View(ctx, func(tx store.Tx) error {
		refs = nil
		return tx.Scan(bucketStreams, prefix, store.PrefixEnd(prefix), func(k string, _ []byte) error {
			var o openRef
			if err := store.GetJSON(tx, bucketStreams, k, &o.ref); err != nil {
				return err
			}
			o.key = k
			refs = append(refs, o)
			return nil
		})
	})
	return refs, err
}

// Recover closes, as interrupted, every recorded live message that no
// sender of this process writes (left open by a crash or a failover; the
// resumed turn streams anew), and forgets it.
func (l *Live) Recover(ctx context.Context) error {
	refs, err := l.open(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range refs {
		surface, rest, _ := strings.Cut(o.key, "/")
		request, _, _ := strings.Cut(rest, "/")
		rt, ok := l.routes[surface]
		l.mu.Lock()
		s := l.streams[request]
		l.mu.Unlock()
		if !ok || (s != nil && !s.stopped() && s.ref() == o.ref) {
			continue
		}
		if err := rt.claim(ctx); err != nil {
			return err
		}
		err := rt.conn.(chat.Streamer).CloseStream(ctx, o.ref, chat.Message{Request: request, Kind: "live", Text: Interrupted})
		if err == nil {
			err = l.store.Update(ctx, func(tx store.Tx) error { return tx.Delete(bucketStreams, o.key) })
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.key, err))
		}
	}
	return errors.Join(errs...)
}

// record saves the live message ref of request on surface (once, when it
// opens).
func (l *Live) record(ctx context.Context, surface, request string, ref chat.MessageRef) error {
	return l.store.Update(ctx, func(tx store.Tx) error {
		return store.PutJSON(tx, bucketStreams, surface+"/"+request+"/"+ref.ID, ref)
	})
}

// pace is how often one live message of rt may be updated.
func pace(rt route) time.Duration {
	return max(rt.conn.(chat.Streamer).StreamPace(), 10*time.Millisecond)
}

// LongAnswer closes a live message whose final answer is too long for it
// (chat.LiveBound): the answer follows as a message of its own, which the
// connector splits or attaches as a file.
const LongAnswer = "The answer is too long for this message: it follows below."

// fitsLive reports whether text fits a live message of conn.
func fitsLive(conn chat.Streamer, text string) bool {
	lb, ok := conn.(chat.LiveBound)
	return !ok || lb.FitsLive(text)
}
