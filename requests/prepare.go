package requests

import (
	"errors"
	"time"

	"github.com/roombridge/roombridge/audit"
)

// preparedChange is a change computed and encoded ahead of the transaction
// that applies it (PrepareChange).
type preparedChange struct {
	event                  Event
	actor, surface, detail string
	after                  *Request
	encoded                []byte
	record                 audit.Prepared
	keys                   writeKeys
}

// PrepareChange computes c on the request rd read, and encodes the result
// and its audit record, ahead of the write transaction: ApplyReadTx(tx,
// id, rd, c) then uses them while the request is still what rd read (the
// sweeper prepares its expiries off the store's single writer). It must be
// given the same c (its event, actor, surface and detail are checked; its
// Mutate cannot be: a change with other edits must not be given rd). The
// change takes the time of its preparation. A change that cannot apply is
// not prepared (ApplyReadTx refuses it as it would have).
func (s *Service) PrepareChange(rd Read, c Change) Read {
	if rd.r == nil {
		return rd
	}
	now := s.clock.Now().UTC()
	after, err := transition(rd.r, c, now)
	if err != nil {
		return rd
	}
	enc, err := encode(after)
	if err != nil {
		return rd
	}
	rec, err := audit.Prepare(changeRecord(rd.r, after, c, now))
	if err != nil {
		return rd
	}
	rd.change = &preparedChange{event: c.Event, actor: c.Actor, surface: c.Surface, detail: c.Detail,
		after: after, encoded: enc, record: rec, keys: keysOf(rd.key, rd.r, after)}
	return rd
}

// changeRecord is the audit record of c, which moved before to after at
// now.
func changeRecord(before, after *Request, c Change, now time.Time) audit.Record {
	return audit.Record{
		Time: now, RequestID: before.ID.String(), Actor: c.Actor, Surface: c.Surface,
		Action: c.Event.String(), From: before.State.String(), To: after.State.String(), Detail: c.Detail,
	}
}

// prepared returns a copy of the request after the change prepared as c,
// its encoding and audit record (nil: none prepared).
func (rd Read) prepared(c Change) (*Request, []byte, audit.Prepared, writeKeys) {
	pc := rd.change
	if pc == nil || pc.event != c.Event || pc.actor != c.Actor || pc.surface != c.Surface || pc.detail != c.Detail {
		return nil, nil, audit.Prepared{}, writeKeys{}
	}
	after := *pc.after // a copy: a transaction may run again
	after.References = append([]ID(nil), pc.after.References...)
	return &after, pc.encoded, pc.record, pc.keys
}

// RefusedError is a change refused before anything was written (an
// illegal transition: it matches ErrIllegalTransition): the transaction is
// as it was, for the caller to go on with. A refusal of another request's
// change inside an observer is another ID's.
type RefusedError struct {
	ID  ID
	Err error
}

// Error names the request and the refusal.
func (e *RefusedError) Error() string { return e.ID.String() + ": " + e.Err.Error() }

// Unwrap is the refusal (ErrIllegalTransition).
func (e *RefusedError) Unwrap() error { return e.Err }

// Refused tells whether err is the refusal of request id's change itself
// (RefusedError), not an error of something the change did.
func Refused(err error, id ID) bool {
	if err == nil {
		return false // no target to allocate (an expiry asks after each change)
	}
	var r *RefusedError
	return errors.As(err, &r) && r.ID == id
}

// transition is before moved by c at now: its new state, times and
// version, with c's edits.
func transition(before *Request, c Change, now time.Time) (*Request, error) {
	next, err := Next(before.State, c.Event)
	if err != nil {
		return nil, &RefusedError{ID: before.ID, Err: err}
	}
	after := *before
	after.References = append([]ID(nil), before.References...)
	after.State = next
	after.Updated = now
	after.Version++
	switch {
	case c.Event == Start:
		after.StartedAt = now
	case next.Terminal():
		after.EndedAt = now
	}
	if c.Mutate != nil {
		c.Mutate(&after)
		// Mutate edits the record, not the transition: the state, version
		// and identity stay what the event and the key say.
		after.ID, after.Owner, after.State, after.Version = before.ID, before.Owner, next, before.Version+1
	}
	return &after, nil
}
