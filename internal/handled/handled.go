// Package handled remembers the inbound events the core has answered, so
// that a connector answers a platform's redelivery of one from what it
// recorded instead of handing it to the core again. A platform redelivers
// an event the connector left unacknowledged (its ack budget ran out while
// the core went on with it, docs/design.md §4): handed to the core again, a
// command would run twice ("R-07 cancelled", then "R-07 has already ended",
// a false refusal audited) and a refusal would be told twice.
//
// A Set also tracks whether each answer was told to its actor, so that of
// an event's deliveries exactly one tells it: the first that claims it, and
// again a later one when that telling failed.
//
// The record is in memory, bounded in number and age: a redelivery after a
// restart or failover reaches the core, whose dedupe keys in the store keep
// what changes state once (requests, replies, commands: rooms).
package handled

import (
	"context"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
)

// MaxEvents bounds the events a Set remembers; the oldest go first.
const MaxEvents = 10000

// told states of a recorded answer.
const (
	untold  = iota // to be told by the next delivery that claims it
	telling        // claimed: a delivery tells it now
	told           // told, or nothing to tell
)

// Set is the record of answered events of one connector. The zero value is
// not usable; call New.
type Set struct {
	clock clock.Clock
	keep  time.Duration
	max   int

	mu    sync.Mutex
	byID  map[string]*entry
	order []string // the keys of byID, oldest first
}

type entry struct {
	at    time.Time
	r     chat.Response
	state int
}

// New returns a Set that remembers an answered event for keep (longer than
// the platform redelivers it), at most MaxEvents of them, by clk's time.
func New(keep time.Duration, clk clock.Clock) *Set {
	return &Set{clock: clk, keep: keep, max: MaxEvents, byID: map[string]*entry{}}
}

// Answer is the core's answer to an event as a Set gives it.
type Answer struct {
	chat.Response
	// Repeat: the event was answered before (this is a redelivery), and
	// Response is that answer; the core was not called again.
	Repeat bool
	// Tell: the caller is to tell the actor the answer (if it has
	// anything to tell), then call Told. It is false for a repeat whose
	// answer was told, or is being told by another delivery, and for
	// Retry (nothing is told of it).
	Tell bool
}

// Handle returns ev's answer: the recorded one if ev (by its ID) was
// answered already, else h's, which it records unless it is Retry (then
// the platform delivers ev again and the core handles it then). An event
// without an ID always goes to h and is not recorded.
func (s *Set) Handle(ctx context.Context, h chat.Handler, ev chat.Event) Answer {
	if a, ok := s.repeat(ev.ID); ok {
		if d, ok := h.(duplicates); ok {
			d.Duplicate(ev)
		}
		return a
	}
	r := h.Handle(ctx, ev)
	if r.Retry {
		return Answer{Response: r}
	}
	if ev.ID != "" {
		s.record(ev.ID, r)
	}
	return Answer{Response: r, Tell: true}
}

// duplicates is a handler that counts the redeliveries answered without it
// (rooms.Router: its inbound metrics).
type duplicates interface {
	Duplicate(ev chat.Event)
}

// repeat returns the recorded answer to id, claiming its telling if no
// delivery has told it.
func (s *Set) repeat(id string) (Answer, bool) {
	if id == "" {
		return Answer{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	e, ok := s.byID[id]
	if !ok {
		return Answer{}, false
	}
	a := Answer{Response: e.r, Repeat: true, Tell: e.state == untold}
	if a.Tell {
		e.state = telling
	}
	return a, true
}

// record keeps r as id's answer, its telling claimed by the caller.
func (s *Set) record(id string, r chat.Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	for len(s.order) >= s.max {
		s.dropOldestLocked()
	}
	if _, ok := s.byID[id]; !ok {
		s.order = append(s.order, id)
	}
	s.byID[id] = &entry{at: s.clock.Now(), r: r, state: telling}
}

// Told records how the telling of id's answer that Handle gave (Tell)
// ended: ok, it was told (or there was nothing to tell), and no other
// delivery tells it; not ok (the send failed), the next redelivery does.
func (s *Set) Told(id string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, found := s.byID[id]; found {
		e.state = untold
		if ok {
			e.state = told
		}
	}
}

// Len is how many answered events the set remembers.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	return len(s.byID)
}

func (s *Set) expireLocked() {
	now := s.clock.Now()
	for len(s.order) > 0 && now.Sub(s.byID[s.order[0]].at) > s.keep {
		s.dropOldestLocked()
	}
}

func (s *Set) dropOldestLocked() {
	delete(s.byID, s.order[0])
	s.order[0] = ""
	s.order = s.order[1:]
}
