package approvals

import (
	"slices"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// updateCardsTx puts card m in place of every posted copy of a's card.
func updateCardsTx(tx store.Tx, a *Approval, m chat.Message) error {
	ps, err := prepareCards(a, m)
	if err != nil {
		return err
	}
	return threads.EnqueueAll(tx, ps)
}

// prepareCards encodes, for updateCardsTx, card m's update of each copy.
func prepareCards(a *Approval, m chat.Message) ([]threads.Prepared, error) {
	return prepareCardsExcept(a, m, "")
}

// prepareCardsExcept is prepareCards but for the copies in queue except.
func prepareCardsExcept(a *Approval, m chat.Message, except string) ([]threads.Prepared, error) {
	ps := make([]threads.Prepared, 0, len(a.Copies))
	for _, c := range a.Copies {
		if except != "" && c.queue() == except {
			continue
		}
		p, err := threads.Prepare(threads.Effect{Op: threads.OpUpdate, Request: c.Request,
			Surface: c.Surface, Ref: c.Ref, Message: m})
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// settlement is a pending approval's move to a final state. It is a pure
// function of the approval and the move, so the sweeper prepares it outside
// the write transaction (off the store's single writer): everything it
// writes is encoded already.
type settlement struct {
	before, after *Approval
	encoded       []byte             // after, as stored
	edits         edits              // after's indexes, as they change
	cards         []threads.Prepared // after's card, on each copy
	retry         []threads.Prepared // an expired request's retry offer (settleExpiry)
	request       requests.Read      // the request an expiry expires, as read when prepared (zero: none)
	change        requests.Change    // what an expiry changes in it (settleExpiry)
	// deferred is the thread queue whose effects an expiry left to the
	// outbox's expansion of expand (settleExpiry; "": none).
	deferred string
	expand   threads.Prepared
}

// settle prepares a's move to state to; reason is why it was withdrawn, or
// a question's answer when to is Answered.
func settle(a *Approval, to State, by, surface, reason string, now time.Time) (*settlement, error) {
	return settleExcept(a, to, by, surface, reason, now, "")
}

// settleExcept is settle without the card copies in queue except.
func settleExcept(a *Approval, to State, by, surface, reason string, now time.Time, except string) (*settlement, error) {
	after := *a
	after.State, after.DecidedBy, after.Surface, after.DecidedAt = to, by, surface, now
	after.NoticeAt = time.Time{} // its notice timer goes (moveNoticeTx)
	if to == Answered {
		after.Answer = reason
	} else {
		after.Reason = reason
	}
	after.Version++
	enc, err := after.encode()
	if err != nil {
		return nil, err
	}
	st := &settlement{before: a, after: &after, encoded: enc, edits: editsOf(a, &after)}
	if slices.ContainsFunc(after.Copies, func(c Copy) bool { return except == "" || c.queue() != except }) {
		if st.cards, err = prepareCardsExcept(&after, Card(&after), except); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// applyTx writes the settlement, with every copy of the card updated.
func (st *settlement) applyTx(tx store.Tx) (*Approval, error) {
	if err := putEditsTx(tx, st.after, st.encoded, st.edits); err != nil {
		return nil, err
	}
	if err := threads.EnqueueAll(tx, st.cards); err != nil {
		return nil, err
	}
	return st.after, nil
}

// settleTx moves a pending approval to its final state, with its cards.
func settleTx(tx store.Tx, a *Approval, to State, by, surface, reason string, now time.Time) (*Approval, error) {
	st, err := settle(a, to, by, surface, reason, now)
	if err != nil {
		return nil, err
	}
	return st.applyTx(tx)
}
