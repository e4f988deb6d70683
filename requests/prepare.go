package requests

import (
	"encoding/json"
	"fmt"
	"time"
)

// preparedChange is a change computed and encoded ahead of the transaction
// that applies it (PrepareChange).
type preparedChange struct {
	event   Event
	after   *Request
	encoded []byte
	at      time.Time
}

// PrepareChange computes c on the request rd read, and encodes the result,
// ahead of the write transaction: ApplyReadTx(tx, id, rd, c), with the same
// c, then uses them while the request is still what rd read (the sweeper
// prepares its expiries off the store's single writer). The change takes
// the time of its preparation. A change that cannot apply is not prepared
// (ApplyReadTx refuses it as it would have).
func (s *Service) PrepareChange(rd Read, c Change) Read {
	if rd.r == nil {
		return rd
	}
	now := s.clock.Now().UTC()
	after, err := transition(rd.r, c, now)
	if err != nil {
		return rd
	}
	enc, err := json.Marshal(after)
	if err != nil {
		return rd
	}
	rd.change = &preparedChange{event: c.Event, after: after, encoded: enc, at: now}
	return rd
}

// prepared returns a copy of the request after the change prepared for
// event, its encoding and time (nil: none prepared).
func (rd Read) prepared(event Event) (*Request, []byte, time.Time) {
	pc := rd.change
	if pc == nil || pc.event != event {
		return nil, nil, time.Time{}
	}
	after := *pc.after // a copy: a transaction may run again
	after.References = append([]ID(nil), pc.after.References...)
	return &after, pc.encoded, pc.at
}

// transition is before moved by c at now: its new state, times and
// version, with c's edits.
func transition(before *Request, c Change, now time.Time) (*Request, error) {
	next, err := Next(before.State, c.Event)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", before.ID, err)
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
