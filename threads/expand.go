package threads

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// An OpExpand effect stands for effects that are rendered only when the
// outbox delivers it, from the records they render (final by then): a
// bulk change (the sweeper expiring thousands of approvals) writes one
// small effect per thread instead of every rendered message, within the
// transaction of the change all the same. The outbox reserves the
// sequence numbers of the effects it stands for (its span), and puts them
// in its place, so that they keep its place in its thread.

// Expander renders the effects an OpExpand effect e stands for (e.Ref
// names what), in order, at most its span, all in e's thread. An error
// wrapping chat.ErrPermanent means there is nothing to render, ever (the
// effect is dropped and audited); any other is retried.
type Expander func(tx store.Tx, e Effect) ([]Prepared, error)

// SetExpander registers x for the OpExpand effects of kind. Call it before
// the outbox is delivered.
func (t *Threads) SetExpander(kind string, x Expander) {
	if t.expanders == nil {
		t.expanders = map[string]Expander{}
	}
	t.expanders[kind] = x
}

// PrepareExpand prepares an OpExpand effect, of kind, for what ref names,
// standing for up to span effects in request's thread on surface.
func PrepareExpand(kind, ref, request, surface string, span int) (Prepared, error) {
	p, err := prepare(Effect{Op: OpExpand, Request: request, Surface: surface, Expand: kind, Ref: ref})
	if err != nil {
		return Prepared{}, err
	}
	p.span = max(span, 1)
	// Its outbox record too (the sweeper's: one an expiry), created now.
	rec, err := store.PrepareEffect(p.effect())
	if err != nil {
		return Prepared{}, err
	}
	p.rec = &rec
	return p, nil
}

// ExpandTx puts in the place of outbox effect se, an OpExpand, the effects
// its expander renders.
func (t *Threads) ExpandTx(tx store.Tx, se store.Effect) error {
	var e Effect
	if err := json.Unmarshal(se.Payload, &e); err != nil {
		return fmt.Errorf("threads: expand %d: %w: %v", se.Seq, chat.ErrPermanent, err)
	}
	x := t.expanders[e.Expand]
	if x == nil {
		return fmt.Errorf("threads: expand %d: no expander for %q", se.Seq, e.Expand)
	}
	switch ok, err := unexpanded(tx, se); {
	case err != nil:
		return fmt.Errorf("threads: expand %d: %w", se.Seq, err)
	case !ok: // before the expander: its failure must not drop what took se's place
		return fmt.Errorf("threads: expand %d: %w", se.Seq, store.ErrExpanded)
	}
	ps, err := x(tx, e)
	if err != nil {
		return fmt.Errorf("threads: expand %s %s: %w", e.Expand, e.Ref, err)
	}
	parts := make([]store.Effect, len(ps))
	for i, p := range ps {
		if p.queue != se.Queue {
			return fmt.Errorf("threads: expand %s %s: %w: an effect for thread %s, not %s", e.Expand, e.Ref, chat.ErrPermanent, p.queue, se.Queue)
		}
		parts[i] = store.Effect{Coalesce: p.coalesce, Payload: p.payload}
	}
	return store.ExpandEffect(tx, se, parts)
}

// unexpanded tells whether OpExpand effect se is still in the outbox as it
// was (false: expanded, its first part under its sequence number, or gone).
func unexpanded(tx store.Tx, se store.Effect) (bool, error) {
	cur, err := store.GetEffect(tx, se.Seq)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil && bytes.Equal(cur.Payload, se.Payload), err
}

// EndedEffects is how many effects EndedTx prepares (TestEndedEffects).
const EndedEffects = 2

// EndedTx prepares the effects of request r's ending on its thread on
// surface, as Observe enqueues them when r ends: its outcome, then its
// parent's final status. An expander renders them, on the surface of the
// effect it expands: the thread it was queued for, wherever the room's
// configuration places r's thread now.
func (t *Threads) EndedTx(tx store.Tx, r *requests.Request, surface string) ([]Prepared, error) {
	waiting, err := waitingTx(tx, r.ID.String())
	if err != nil {
		return nil, err
	}
	return t.ended(tx, r, surface, waiting)
}

// EndedQueue is the outbox queue of r's thread, where EndedTx's effects go
// ("": r has no thread).
func (t *Threads) EndedQueue(r *requests.Request) string {
	surface, _, ok := t.Place(r)
	if !ok {
		return ""
	}
	return queueOf(surface, r.ID.String())
}
