package requests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/store"
)

// Store buckets and notification topics of this package.
const (
	bucketRequests = "requests"
	bucketByState  = "requests_by_state"
	bucketQueue    = "agent_queue"
	bucketRunning  = "agent_running"
	bucketByEvent  = "requests_by_event"

	// TopicRequests is notified on every created or changed request.
	TopicRequests = "requests"
)

// TopicAgent is notified when an agent's queue changes (a request of it was
// approved, cancelled, finished...).
func TopicAgent(agent string) string { return "agent:" + agent }

// Errors of the service.
var (
	// ErrUnknown: no request has this ID.
	ErrUnknown = errors.New("unknown request")
	// ErrDuplicate: the inbound event that would create the request was seen
	// already.
	ErrDuplicate = errors.New("duplicate event")
)

// dedupeTTL is how long inbound event IDs are remembered: longer than the
// platforms' retry windows (Slack retries for up to ~5 min, Feishu ~1 h).
const dedupeTTL = 24 * time.Hour

// Observer is told, inside the transaction, about every request created
// (before is nil) or changed. Observers enqueue chat effects through the
// outbox so that the state change and its effects commit together.
type Observer func(tx store.Tx, before, after *Request) error

// Service applies changes to requests through the store.
type Service struct {
	store     store.Store
	clock     clock.Clock
	owner     string
	owners    map[string]bool
	observers []Observer
	names     []string // of observers, in order
	maxQueue  int      // requests/queue.go
	maxBytes  int      // of each text a request carries (MaxBytes)
}

// NewService returns the service of one owner. owners are the identities
// (surface:user) whose requests skip approval.
func NewService(s store.Store, c clock.Clock, owner string, owners []string) *Service {
	o := make(map[string]bool, len(owners))
	for _, u := range owners {
		o[u] = true
	}
	return &Service{store: s, clock: c, owner: owner, owners: o}
}

// AddObserver registers o under name; observers run in the order they were
// added. Call it before the service is used.
func (s *Service) AddObserver(name string, o Observer) {
	s.observers = append(s.observers, o)
	s.names = append(s.names, name)
}

// Observers names the registered observers, in the order they run.
func (s *Service) Observers() []string { return slices.Clone(s.names) }

// Owner returns the owner whose requests the service keeps.
func (s *Service) Owner() string { return s.owner }

// Store returns the store the service writes through.
func (s *Service) Store() store.Store { return s.store }

// Clock returns the service's clock.
func (s *Service) Clock() clock.Clock { return s.clock }

// IsOwner reports whether user (surface:id) is an owner.
func (s *Service) IsOwner(user string) bool { return s.owners[user] }

// Ask is what a new request is made of.
type Ask struct {
	Agent   string
	Room    string
	Surface string
	User    string // surface:id
	Text    string
	RetryOf ID
	// DelegatedBy is set when an agent asks another agent.
	DelegatedBy ID
	// EventKey dedupes inbound platform events (e.g. "slack:Ev123").
	EventKey string
	// Origin names the chat message that asked ("slack:C1/1700.000100",
	// Origin), so that its edit or deletion finds the request (OriginTx).
	Origin string
	// Approved creates the request approved whatever its requester (for
	// delegated asks, whose root was approved already).
	Approved bool
}

func (s *Service) key(id ID) string {
	var buf [64]byte // one allocation, the string's
	return string(id.appendKey(append(append(buf[:0], s.owner...), '/')))
}

// Create makes a new request: approved if asked by an owner, else pending.
func (s *Service) Create(ctx context.Context, a Ask) (*Request, error) {
	var r *Request
	err := s.store.Update(ctx, func(tx store.Tx) error {
		var err error
		r, err = s.CreateTx(tx, a)
		return err
	})
	return r, err
}

// CreateTx is Create inside the caller's transaction.
func (s *Service) CreateTx(tx store.Tx, a Ask) (*Request, error) {
	return s.createTx(tx, a, nil, false)
}

// createTx creates a request. With inherit set, refs are its references (a
// retry keeps its original's: short mentions like R-07 in the ask were
// relative to the day it was first asked, not to today); otherwise they are
// read from the ask's text.
func (s *Service) createTx(tx store.Tx, a Ask, refs []ID, inherit bool) (*Request, error) {
	now := s.clock.Now().UTC()
	if a.Agent == "" || a.User == "" || a.Surface == "" {
		return nil, errors.New("requests: create: agent, user and surface are required")
	}
	if err := s.checkAsk(a.Text); err != nil {
		return nil, err
	}
	if err := s.checkQueue(tx, a.Agent); err != nil {
		return nil, err
	}
	if a.EventKey != "" {
		fresh, err := store.Dedupe(tx, "ask:"+a.EventKey, now, dedupeTTL)
		if err != nil {
			return nil, fmt.Errorf("requests: create: %w", err)
		}
		if !fresh {
			return nil, fmt.Errorf("requests: create: %w %s", ErrDuplicate, a.EventKey)
		}
	}
	if inherit {
		refs = append([]ID(nil), refs...)
	} else {
		refs = nil
		for _, id := range FindRefs(a.Text, now) {
			if _, err := s.GetTx(tx, id); err != nil {
				return nil, fmt.Errorf("requests: create: the ask mentions %s: %w", id, err)
			}
			refs = append(refs, id)
		}
	}
	if !a.RetryOf.IsZero() {
		if _, err := s.GetTx(tx, a.RetryOf); err != nil {
			return nil, fmt.Errorf("requests: create: retry of %s: %w", a.RetryOf, err)
		}
	}
	day := NewID(now, 1)
	n, err := store.NextSeq(tx, "request_id/"+s.owner+"/"+day.Key()[:8])
	if err != nil {
		return nil, fmt.Errorf("requests: create: %w", err)
	}
	r := &Request{
		ID: NewID(now, int(n)), Owner: s.owner, Agent: a.Agent, Room: a.Room,
		Surface: a.Surface, Requester: a.User, Ask: a.Text, State: Pending,
		RetryOf: a.RetryOf, References: refs, DelegatedBy: a.DelegatedBy,
		Created: now, Updated: now, Version: 1,
	}
	if a.Approved || s.owners[a.User] {
		r.State = Approved
	}
	if err := s.write(tx, nil, r, nil); err != nil {
		return nil, err
	}
	if err := s.rememberOrigin(tx, a.Origin, r.ID, now); err != nil {
		return nil, err
	}
	detail := clip.Text(a.Text, 200, clip.Bytes)
	if !a.RetryOf.IsZero() {
		detail = "retry of " + a.RetryOf.String() + ": " + detail
	}
	if err := audit.Append(tx, audit.Record{
		Time: now, RequestID: r.ID.String(), Actor: a.User, Surface: a.Surface,
		Action: "create", To: r.State.String(), Detail: detail,
	}); err != nil {
		return nil, err
	}
	if err := s.observe(tx, nil, r, nil); err != nil {
		return nil, err
	}
	return r, nil
}

// write stores r and keeps the indexes in step with its state.
func (s *Service) write(tx store.Tx, before, r *Request, encoded []byte) error {
	return s.writeKeysTx(tx, before, r, encoded, keysOf(s.key(r.ID), before, r))
}

// writeKeys are the keys write changes for a request's move from before
// to r (keysOf): r's own, its states' in the index of states (was: none
// for a new request), and its agent's topic; built ahead of the
// transaction for a prepared change (PrepareChange), off the store's
// writer.
type writeKeys struct{ key, was, is, topic string }

func keysOf(key string, before, r *Request) writeKeys {
	w := writeKeys{key: key, is: r.State.String() + "/" + key, topic: TopicAgent(r.Agent)}
	if before != nil {
		w.was = before.State.String() + "/" + key
	}
	return w
}

// queueKey is request id's key in agent's queue and running indexes.
func (s *Service) queueKey(agent string, id ID) string { return s.owner + "/" + agent + "/" + id.Key() }

// writeKeysTx is write with r's keys w.
func (s *Service) writeKeysTx(tx store.Tx, before, r *Request, encoded []byte, w writeKeys) error {
	k := w.key
	if before != nil {
		if err := tx.Delete(bucketByState, w.was); err != nil {
			return err
		}
	}
	if err := tx.Put(bucketByState, w.is, nil); err != nil {
		return err
	}
	if before != nil && before.Agent != r.Agent {
		// Reassigned: leave the old agent's queue and running indexes.
		old := s.queueKey(before.Agent, r.ID)
		if err := tx.Delete(bucketQueue, old); err != nil {
			return err
		}
		if err := tx.Delete(bucketRunning, old); err != nil {
			return err
		}
	}
	if err := s.countQueued(tx, before, r); err != nil {
		return fmt.Errorf("requests: write %s: %w", r.ID, err)
	}
	same := before != nil && before.Agent == r.Agent
	for _, idx := range []struct {
		bucket  string
		in, was bool // was: in it before (only then is there a key to delete)
	}{{bucketQueue, r.State == Approved, same && before.State == Approved},
		{bucketRunning, r.State == Running, same && before.State == Running}} {
		var err error
		switch {
		case idx.in:
			err = tx.Put(idx.bucket, s.queueKey(r.Agent, r.ID), nil)
		case idx.was:
			err = tx.Delete(idx.bucket, s.queueKey(r.Agent, r.ID))
		}
		if err != nil {
			return err
		}
	}
	if encoded == nil { // else r's JSON, encoded ahead (PrepareChange)
		var err error
		if encoded, err = encode(r); err != nil {
			return err
		}
	}
	if err := tx.Put(bucketRequests, k, encoded); err != nil {
		return fmt.Errorf("requests: write %s: %w", r.ID, err)
	}
	tx.Notify(TopicRequests)
	tx.Notify(w.topic)
	return nil
}

// Get returns the request id.
func (s *Service) Get(ctx context.Context, id ID) (*Request, error) {
	var r *Request
	err := s.store.View(ctx, func(tx store.Tx) error {
		var err error
		r, err = s.GetTx(tx, id)
		return err
	})
	return r, err
}

// GetTx is Get inside the caller's transaction.
func (s *Service) GetTx(tx store.Tx, id ID) (*Request, error) {
	rd, err := s.ReadTx(tx, id)
	return rd.r, err
}

// Read is a request as one transaction read it (ReadTx), for a later
// transaction's ApplyReadTx: the sweeper reads and decodes outside the
// store's single writer, which then decodes again only what changed.
type Read struct {
	raw    []byte
	r      *Request
	key    string          // r's store key
	change *preparedChange // PrepareChange
}

// ReadTx reads request id, for ApplyReadTx.
func (s *Service) ReadTx(tx store.Tx, id ID) (Read, error) {
	return s.readTx(tx, id, Read{})
}

// readTx reads request id, reusing hint's decoded request if the stored
// bytes are still the ones hint was decoded from.
func (s *Service) readTx(tx store.Tx, id ID, hint Read) (Read, error) {
	key := hint.key
	if hint.r == nil || hint.r.ID != id || key == "" {
		key = s.key(id)
	}
	if hint.r != nil && hint.r.ID == id {
		same, err := store.Unchanged(tx, bucketRequests, key, hint.raw)
		if err != nil {
			return Read{}, s.readErr(id, err)
		}
		if same {
			r := *hint.r // a copy: a transaction may run again
			return Read{raw: hint.raw, r: &r, key: key, change: hint.change}, nil
		}
	}
	b, err := tx.Get(bucketRequests, key)
	if err != nil {
		return Read{}, s.readErr(id, err)
	}
	var r Request
	if err := store.Decode(b, &r); err != nil {
		return Read{}, fmt.Errorf("requests: get %s: store: decode %s/%s: %w", id, bucketRequests, key, err)
	}
	return Read{raw: b, r: &r, key: key}, nil
}

// readErr is the error of reading request id.
func (s *Service) readErr(id ID, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w %s", ErrUnknown, id)
	}
	return fmt.Errorf("requests: get %s: %w", id, err)
}

// Change is one transition to apply.
type Change struct {
	Event   Event
	Actor   string // surface:user, or system:<part>
	Surface string
	Detail  string
	// Mutate, if set, edits the record along with the transition (result,
	// reason, session...).
	Mutate func(*Request)
	// Skip names observers (as added) not told of this change: the caller
	// makes their effects itself (the sweeper has a thread's rendered when
	// the outbox delivers them).
	Skip []string
}

// Apply moves request id by c.Event, with its audit record, in one
// transaction. An illegal transition changes nothing and returns an error
// naming both states.
func (s *Service) Apply(ctx context.Context, id ID, c Change) (*Request, error) {
	var r *Request
	err := s.store.Update(ctx, func(tx store.Tx) error {
		var err error
		r, err = s.ApplyTx(tx, id, c)
		return err
	})
	return r, err
}

// ApplyTx is Apply inside the caller's transaction.
func (s *Service) ApplyTx(tx store.Tx, id ID, c Change) (*Request, error) {
	return s.ApplyReadTx(tx, id, Read{}, c)
}

// ApplyReadTx is ApplyTx given hint, request id as an earlier transaction
// read it (ReadTx; zero: none): the request is decoded again only if it
// changed since, and the change hint prepared (PrepareChange) is applied as
// it was computed.
func (s *Service) ApplyReadTx(tx store.Tx, id ID, hint Read, c Change) (*Request, error) {
	rd, err := s.readTx(tx, id, hint)
	if err != nil {
		return nil, err
	}
	before := rd.r
	after, enc, rec, keys := rd.prepared(c)
	if after == nil {
		now := s.clock.Now().UTC()
		if after, err = transition(before, c, now); err != nil {
			return nil, err
		}
		if rec, err = audit.Prepare(changeRecord(before, after, c, now)); err != nil {
			return nil, err
		}
		keys = keysOf(rd.key, before, after)
	}
	if err := s.writeKeysTx(tx, before, after, enc, keys); err != nil {
		return nil, err
	}
	if err := rec.AppendTx(tx); err != nil {
		return nil, err
	}
	if err := s.observe(tx, before, after, c.Skip); err != nil {
		return nil, err
	}
	return after, nil
}

// observe tells the observers (but those skip names) of a change.
func (s *Service) observe(tx store.Tx, before, after *Request, skip []string) error {
	for i, o := range s.observers {
		if len(skip) > 0 && slices.Contains(skip, s.names[i]) {
			continue
		}
		if err := o(tx, before, after); err != nil {
			return err
		}
	}
	return nil
}

// UpdateTx edits a request without a state change (session, cancel flag),
// with an audit record when action is not empty.
func (s *Service) UpdateTx(tx store.Tx, id ID, actor, action, detail string, mutate func(*Request)) (*Request, error) {
	before, err := s.GetTx(tx, id)
	if err != nil {
		return nil, err
	}
	after := *before
	after.References = append([]ID(nil), before.References...)
	mutate(&after)
	after.ID, after.Owner, after.State, after.Version = before.ID, before.Owner, before.State, before.Version+1
	after.Updated = s.clock.Now().UTC()
	if err := s.write(tx, before, &after, nil); err != nil {
		return nil, err
	}
	if action != "" {
		if err := audit.Append(tx, audit.Record{
			Time: after.Updated, RequestID: id.String(), Actor: actor, Action: action,
			From: before.State.String(), To: after.State.String(), Detail: detail,
		}); err != nil {
			return nil, err
		}
	}
	if err := s.observe(tx, before, &after, nil); err != nil {
		return nil, err
	}
	return &after, nil
}

// Retry makes a new request that asks the same of the same agent, with
// RetryOf set. Only a request in a terminal state can be retried.
func (s *Service) Retry(ctx context.Context, id ID, user, surface string) (*Request, error) {
	return s.RetryEvent(ctx, id, user, surface, "")
}

// RetryEvent is Retry for an inbound platform event (eventKey, as in
// Ask.EventKey): a redelivery of the same event makes no second request
// (ErrDuplicate).
func (s *Service) RetryEvent(ctx context.Context, id ID, user, surface, eventKey string) (*Request, error) {
	var r *Request
	err := s.store.Update(ctx, func(tx store.Tx) error {
		old, err := s.GetTx(tx, id)
		if err != nil {
			return err
		}
		if !old.State.Terminal() {
			return fmt.Errorf("requests: retry %s: it is still %s (retry makes a new request once it has ended)", id, old.State)
		}
		r, err = s.createTx(tx, Ask{Agent: old.Agent, Room: old.Room, Surface: surface, User: user, Text: old.Ask, RetryOf: id, EventKey: eventKey}, old.References, true)
		return err
	})
	return r, err
}

// Filter selects requests for List.
type Filter struct {
	State State  // 0: any
	Agent string // "": any
	Limit int    // 0: no limit
}

// List returns requests in ID order.
func (s *Service) List(ctx context.Context, f Filter) ([]*Request, error) {
	var out []*Request
	err := s.store.View(ctx, func(tx store.Tx) error {
		add := func(k string) error {
			var r Request
			if err := store.GetJSON(tx, bucketRequests, k, &r); err != nil {
				return err
			}
			if f.Agent != "" && r.Agent != f.Agent {
				return nil
			}
			out = append(out, &r)
			if f.Limit > 0 && len(out) >= f.Limit {
				return store.ErrStop
			}
			return nil
		}
		if f.State != 0 {
			p := f.State.String() + "/"
			return tx.Scan(bucketByState, p+s.owner+"/", store.PrefixEnd(p+s.owner+"/"), func(k string, _ []byte) error {
				return add(strings.TrimPrefix(k, p))
			})
		}
		p := s.owner + "/"
		return tx.Scan(bucketRequests, p, store.PrefixEnd(p), func(k string, _ []byte) error { return add(k) })
	})
	return out, err
}

// EachTx calls fn for every request of the owner in ID order, inside the
// caller's transaction; fn returning store.ErrStop ends the walk without
// error.
func (s *Service) EachTx(tx store.Tx, fn func(*Request) error) error {
	p := s.owner + "/"
	return tx.Scan(bucketRequests, p, store.PrefixEnd(p), func(k string, v []byte) error {
		var r Request
		if err := store.Decode(v, &r); err != nil {
			return fmt.Errorf("requests: decode %s: %w", k, err)
		}
		return fn(&r)
	})
}

// QueueTx returns the approved (queued) requests of agent in ID order, up to
// limit (0: all).
func (s *Service) QueueTx(tx store.Tx, agent string, limit int) ([]*Request, error) {
	return s.indexed(tx, bucketQueue, agent, limit)
}

// RunningTx returns the running requests of agent in ID order.
func (s *Service) RunningTx(tx store.Tx, agent string) ([]*Request, error) {
	return s.indexed(tx, bucketRunning, agent, 0)
}

// NextTx returns what agent should work on: its running request if it has
// one (after a restart: to resume it), else its first queued request, else nil.
// It reads one index entry, whatever the length of the queue.
func (s *Service) NextTx(tx store.Tx, agent string) (*Request, error) {
	for _, b := range []string{bucketRunning, bucketQueue} {
		rs, err := s.indexed(tx, b, agent, 1)
		if err != nil || len(rs) > 0 {
			if len(rs) > 0 {
				return rs[0], err
			}
			return nil, err
		}
	}
	return nil, nil
}

func (s *Service) indexed(tx store.Tx, bucket, agent string, limit int) ([]*Request, error) {
	var out []*Request
	p := s.owner + "/" + agent + "/"
	err := tx.Scan(bucket, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		var r Request
		if err := store.GetJSON(tx, bucketRequests, s.owner+"/"+strings.TrimPrefix(k, p), &r); err != nil {
			return err
		}
		out = append(out, &r)
		if limit > 0 && len(out) >= limit {
			return store.ErrStop
		}
		return nil
	})
	return out, err
}
