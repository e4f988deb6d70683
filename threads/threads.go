// Package threads renders requests into thread titles, status lines and cards,
// and delivers the outbox: effects in order per thread, status edits
// coalesced, each recorded as delivered in the store; in HA through Fenced
// connectors, each send preceded by a claim of leadership.
package threads

import (
	"errors"
	"fmt"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Buckets of this package.
const (
	bucketThreadRefs  = "thread_refs"
	bucketThreadReqs  = "thread_requests" // surface/channel/thread → request ID
	bucketMessageRefs = "message_refs"
)

// Op is what an effect does.
type Op string

// Effect operations.
const (
	OpThread Op = "thread" // post the parent of a request's thread
	OpReply  Op = "reply"  // post in a request's thread
	OpUpdate Op = "update" // replace a posted message
	OpDirect Op = "direct" // message one user directly
	OpExpand Op = "expand" // stands for effects rendered at delivery (expand.go)
)

// Effect is the payload of an outbox entry.
type Effect struct {
	Op      Op           `json:"op"`
	Request string       `json:"request"`
	Surface string       `json:"surface"`
	Channel string       `json:"channel,omitempty"` // OpThread
	User    string       `json:"user,omitempty"`    // OpDirect: the surface's user ID
	Ref     string       `json:"ref,omitempty"`     // OpUpdate: name of the message to replace
	Save    string       `json:"save,omitempty"`    // name to record the posted message under
	Expand  string       `json:"expand,omitempty"`  // OpExpand: the expander, which reads Ref
	Message chat.Message `json:"message"`
}

// Threads decides where each request's thread lives and turns request
// changes into outbox effects, in the transaction of the change.
type Threads struct {
	rooms    *directory.Rooms
	requests *requests.Service // SetRequests: names the asker of a delegated request
	// Links, if set, gives the web page of a request ("": none): thread
	// parents carry it as an "Open" field.
	Links func(id string) string

	expanders map[string]Expander // SetExpander
}

// New returns Threads that place threads by the room directory rooms (its
// running surfaces are those threads are posted on).
func New(rooms *directory.Rooms) *Threads {
	return &Threads{rooms: rooms}
}

// Place returns the surface and channel of a request's thread: the surface it
// was asked on if the room is bound there, else the room's first bound
// surface (Slack, Feishu, console); only surfaces that run count.
func (t *Threads) Place(r *requests.Request) (surface, channel string, ok bool) {
	return t.rooms.Place(r.Room, r.Surface)
}

// ParentRef is the name under which a request's parent message is recorded.
func ParentRef(id string) string { return id + "/parent" }

// ObserverName is the name Observe is added under (requests.Service
// AddObserver), which a requests.Change skips it by.
const ObserverName = "threads"

// Observe is a requests.Observer: a new request gets its thread, every change
// updates the parent's status (coalesced), an ending posts the outcome.
func (t *Threads) Observe(tx store.Tx, before, after *requests.Request) error {
	surface, channel, ok := t.Place(after)
	if !ok {
		return nil
	}
	id := after.ID.String()
	if before == nil {
		// A request just created waits on nothing yet: no read (on etcd,
		// the one round trip of a creation that no cache can save).
		x, err := t.extraTx(tx, after, "")
		if err != nil {
			return err
		}
		return Enqueue(tx, Effect{Op: OpThread, Request: id, Surface: surface, Channel: channel,
			Save: ParentRef(id), Message: ParentWith(after, x)})
	}
	waiting, err := waitingTx(tx, id)
	if err != nil {
		return err
	}
	if after.State.Terminal() && !before.State.Terminal() {
		ps, err := t.ended(tx, after, surface, waiting)
		if err != nil {
			return err
		}
		return EnqueueAll(tx, ps)
	}
	if StatusLine(before, waiting) != StatusLine(after, waiting) || before.Ask != after.Ask {
		x, err := t.extraTx(tx, after, waiting)
		if err != nil {
			return err
		}
		return Enqueue(tx, parentUpdate(after, surface, x))
	}
	return nil
}

// parentUpdate is the edit of r's parent to show r as it is now.
func parentUpdate(r *requests.Request, surface string, x Extra) Effect {
	id := r.ID.String()
	return Effect{Op: OpUpdate, Request: id, Surface: surface, Ref: ParentRef(id), Message: ParentWith(r, x)}
}

// ended prepares the effects of r's ending on its thread (on surface), in
// order: the outcome, then the parent's final status (an ending always
// changes it: no line of an ended request is one of a request under way).
func (t *Threads) ended(tx store.Tx, r *requests.Request, surface, waiting string) ([]Prepared, error) {
	x, err := t.extraTx(tx, r, waiting)
	if err != nil {
		return nil, err
	}
	out := make([]Prepared, 0, 2)
	for _, e := range []Effect{{Op: OpReply, Request: r.ID.String(), Surface: surface, Message: Outcome(r)}, parentUpdate(r, surface, x)} {
		p, err := Prepare(e)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Reply queues m as a reply in r's thread.
func (t *Threads) Reply(tx store.Tx, r *requests.Request, m chat.Message) error {
	surface, _, ok := t.Place(r)
	if !ok {
		return nil
	}
	if m.Request == "" {
		m.Request = r.ID.String()
	}
	return Enqueue(tx, Effect{Op: OpReply, Request: r.ID.String(), Surface: surface, Message: m})
}

// Enqueue puts e in the outbox. Effects of one request on one surface are
// delivered in order; parent updates of one request coalesce.
func Enqueue(tx store.Tx, e Effect) error {
	p, err := Prepare(e)
	if err != nil {
		return err
	}
	return p.EnqueueTx(tx)
}

// Prepared is an effect encoded ahead of the transaction that enqueues it
// (Prepare), so that the store's writer does not spend its time encoding
// (the sweeper prepares its expiries outside the write transaction).
type Prepared struct {
	queue, coalesce string
	payload         []byte
	span            int                   // PrepareExpand
	rec             *store.PreparedEffect // its outbox record, if encoded (PrepareExpand)
}

// Queue is the outbox queue (the thread) the effect goes to.
func (p Prepared) Queue() string { return p.queue }

// Prepare encodes e for EnqueueTx, as Enqueue does. An OpExpand effect is
// PrepareExpand's, which reserves its parts' place.
func Prepare(e Effect) (Prepared, error) {
	if e.Op == OpExpand {
		return Prepared{}, errors.New("threads: enqueue: an expand effect without a span (PrepareExpand)")
	}
	return prepare(e)
}

// prepare is Prepare for any op.
func prepare(e Effect) (Prepared, error) {
	if e.Message.IdempotencyKey == "" && e.Save != "" {
		e.Message.IdempotencyKey = e.Surface + "/" + e.Save
	}
	payload, err := e.encode()
	if err != nil {
		return Prepared{}, fmt.Errorf("threads: enqueue: %w", err)
	}
	p := Prepared{queue: queueOf(e.Surface, e.Request), payload: payload}
	if e.Op == OpUpdate {
		p.coalesce = e.Surface + "/" + e.Ref
	}
	return p, nil
}

// Queue is the outbox queue (the thread) of e.
func (e Effect) Queue() string { return queueOf(e.Surface, e.Request) }

// queueOf is the outbox queue of request's thread on surface.
func queueOf(surface, request string) string { return surface + "/" + request }

// EnqueueAll enqueues prepared effects in order.
func EnqueueAll(tx store.Tx, ps []Prepared) error {
	for _, p := range ps {
		if err := p.EnqueueTx(tx); err != nil {
			return err
		}
	}
	return nil
}

// EnqueueTx appends the prepared effect to the outbox.
func (p Prepared) EnqueueTx(tx store.Tx) error {
	if p.rec != nil {
		return p.rec.EnqueueTx(tx)
	}
	e := p.effect()
	return store.Enqueue(tx, &e)
}

// effect is p's outbox effect, created now: wall time (not a clock.Clock:
// Enqueue has none), for the delivery latency metric only; an effect whose
// record was encoded ahead (PrepareExpand) was created then.
func (p Prepared) effect() store.Effect {
	return store.Effect{Queue: p.queue, Coalesce: p.coalesce, Payload: p.payload, Created: time.Now().UTC(), Span: p.span}
}

// ThreadRef returns the recorded thread of request id on surface.
func ThreadRef(tx store.Tx, surface, id string) (chat.ThreadRef, error) {
	var t chat.ThreadRef
	err := store.GetJSON(tx, bucketThreadRefs, surface+"/"+id, &t)
	return t, err
}

// RequestOfThread returns the ID of the request whose thread t is, or
// store.ErrNotFound for any other thread.
func RequestOfThread(tx store.Tx, t chat.ThreadRef) (string, error) {
	b, err := tx.Get(bucketThreadReqs, threadKey(t))
	return string(b), err
}

func threadKey(t chat.ThreadRef) string { return t.Surface + "/" + t.Channel + "/" + t.ID }

func saveThreadRef(tx store.Tx, request string, t chat.ThreadRef) error {
	if err := store.PutJSON(tx, bucketThreadRefs, t.Surface+"/"+request, t); err != nil {
		return err
	}
	return tx.Put(bucketThreadReqs, threadKey(t), []byte(request))
}

// MessageRef returns the message recorded under name on surface.
func MessageRef(tx store.Tx, surface, name string) (chat.MessageRef, error) {
	var m chat.MessageRef
	err := store.GetJSON(tx, bucketMessageRefs, surface+"/"+name, &m)
	return m, err
}

func saveMessageRef(tx store.Tx, surface, name string, ref chat.MessageRef) error {
	return store.PutJSON(tx, bucketMessageRefs, surface+"/"+name, ref)
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
