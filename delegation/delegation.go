// Package delegation carries out agents asking agents (docs/design.md §3): ask_agent
// creates the delegated request and a rendezvous in one transaction, the
// asking request waits (running, parked) while the rendezvous is open, and
// the delegated request's end closes the rendezvous and delivers its answer
// to the asker's turn inbox in the same transaction. A cancelled asker
// cancels the requests it waits on. Rendezvous live in the store, so a
// restart never breaks the correlation.
package delegation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/bgcmd"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// actor is how delegation appears in the audit log.
const actor = "system:delegation"

// Buckets of this package.
const (
	// bucketRendezvous: <owner>/<RB key> → Rendezvous (one per delegated
	// request, kept after it closes).
	bucketRendezvous = "delegation_rendezvous"
	// bucketOpen indexes rendezvous not yet closed by their asker:
	// <owner>/<RA key>/<RB key> → nil.
	bucketOpen = "delegation_open"
)

// Rendezvous states. Open and WaitingOnTask are open; the others are final.
const (
	Open          = "open"
	WaitingOnTask = "waiting_on_task"
	Answered      = "answered"
	Failed        = "failed"
	Cancelled     = "cancelled"
	TimedOut      = "timed_out"
)

// Rendezvous ties an asking request (From, RA) to the request it delegated
// to (To, RB).
type Rendezvous struct {
	From    requests.ID `json:"from"`
	To      requests.ID `json:"to"`
	Agent   string      `json:"agent"`
	State   string      `json:"state"`
	Reason  string      `json:"reason,omitempty"`
	Created time.Time   `json:"created"`
	Updated time.Time   `json:"updated"`
	// Deadline is when an open rendezvous times out (zero: never).
	Deadline time.Time `json:"deadline,omitzero"`
}

// TimerKind is the kind of the rendezvous timeouts in the store's expiry
// index (swept by the ttl sweeper, through Due and Expire).
const TimerKind = "rendezvous"

// IsOpen reports whether the rendezvous still holds its asker.
func (rv *Rendezvous) IsOpen() bool { return rv.State == Open || rv.State == WaitingOnTask }

// ErrRefused: the delegation was refused (the message says why).
var ErrRefused = errors.New("refused")

// Options configure a Service.
type Options struct {
	Requests *requests.Service
	// Agents are the agents that may be asked (empty: any).
	Agents []string
	// MaxTasks caps each agent's concurrent background tasks (agents
	// missing or 0: DefaultMaxTasks).
	MaxTasks map[string]int
	// Workdir is where background commands run ("": the bridge's).
	Workdir string
	// Threads, if set, gets a line in the starting request's thread for
	// each task's start and end, and a notice for a result that arrived
	// after its request ended.
	Threads *threads.Threads
	// RendezvousTimeout, if set, is how long an asker waits on the
	// delegated request's answer: then the rendezvous times out, the asker
	// is answered so and the delegated request is cancelled (0: it waits
	// as long as it takes).
	RendezvousTimeout time.Duration
	Log               *slog.Logger
}

// Service implements agents.Delegator over the store. Register its Observe
// with the request service before anything runs.
type Service struct {
	svc     *requests.Service
	agents  map[string]bool
	caps    map[string]int
	workdir string
	log     *slog.Logger
	threads *threads.Threads
	timeout time.Duration
	tasks   tasks
	// Remote, if set, runs the background commands of the agents it
	// hosts (runner-hosted agents: on their runner); set before Run.
	Remote Remote
}

var _ agents.Delegator = (*Service)(nil)

// New returns a delegation service.
func New(o Options) *Service {
	s := &Service{svc: o.Requests, log: o.Log, agents: map[string]bool{}, caps: o.MaxTasks, workdir: o.Workdir, threads: o.Threads,
		timeout: o.RendezvousTimeout}
	s.tasks.procs, s.tasks.remote = map[string]*bgcmd.Cmd{}, map[string]string{}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, a := range o.Agents {
		s.agents[a] = true
	}
	return s
}

func rvKey(rb *requests.Request) string { return rb.Owner + "/" + rb.ID.Key() }

func openPrefix(ra *requests.Request) string { return ra.Owner + "/" + ra.ID.Key() + "/" }

// AskAgent creates request RB for agent on behalf of running request from,
// and the rendezvous from → RB, in one transaction. Asking oneself or an
// agent up the delegation chain (which waits, so would deadlock) is refused.
// key is the call's idempotency key (agents.CallKey; zero: none): the same
// call repeated by a resumed turn gets the RB of the first, and nothing is
// created (audited as call_replayed). The first call's answer is recorded
// in the transaction that creates RB.
func (s *Service) AskAgent(ctx context.Context, from requests.ID, agent, text string, key agents.CallKey) (requests.ID, error) {
	var id requests.ID
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		ra, err := s.svc.GetTx(tx, from)
		if err != nil {
			return err
		}
		if first, ok, err := agents.ReplayCallTx(tx, s.svc, ra, key); err != nil || ok {
			if err == nil {
				id, err = requests.ParseID(first.RequestID)
			}
			return err
		}
		if refusal := s.checkAsk(tx, ra, agent, text); refusal != "" {
			return fmt.Errorf("%w: %s", ErrRefused, refusal)
		}
		rb, err := s.svc.CreateTx(tx, requests.Ask{Agent: agent, Room: ra.Room, Surface: ra.Surface,
			User: ra.Requester, Text: text, DelegatedBy: ra.ID, Approved: true})
		if err != nil {
			return err
		}
		now := s.svc.Clock().Now().UTC()
		rv := Rendezvous{From: ra.ID, To: rb.ID, Agent: agent, State: Open, Created: now, Updated: now}
		if s.timeout > 0 {
			rv.Deadline = now.Add(s.timeout).Truncate(time.Millisecond) // the expiry index keeps milliseconds
			if err := store.AddTimer(tx, TimerKind, rv.Deadline, rvKey(rb)); err != nil {
				return err
			}
		}
		if err := store.PutJSON(tx, bucketRendezvous, rvKey(rb), rv); err != nil {
			return err
		}
		if err := tx.Put(bucketOpen, openPrefix(ra)+rb.ID.Key(), nil); err != nil {
			return err
		}
		if err := s.refreshWaitingTx(tx, ra.ID); err != nil {
			return err
		}
		if err := agents.RecordCallTx(tx, key, agents.Response{OK: true, RequestID: rb.ID.String()}); err != nil {
			return err
		}
		id = rb.ID
		return audit.Append(tx, audit.Record{Time: now, RequestID: ra.ID.String(), Actor: "agent:" + ra.Agent,
			Action: "ask_agent", From: ra.State.String(), To: ra.State.String(),
			Detail: fmt.Sprintf("asked %s: %s (%s)", agent, rb.ID, clip.Text(text, 200, clip.Bytes))})
	})
	if errors.Is(err, ErrRefused) {
		s.auditRefusal(ctx, from, err)
	}
	if err != nil {
		return requests.ID{}, fmt.Errorf("delegation: ask %s: %w", agent, err)
	}
	return id, nil
}

// checkAsk returns why ra may not ask agent, or "".
func (s *Service) checkAsk(tx store.Tx, ra *requests.Request, agent, text string) string {
	switch {
	case ra.State != requests.Running:
		return fmt.Sprintf("%s is %s, not running", ra.ID, ra.State)
	case agent == "":
		return "no agent named"
	case len(s.agents) > 0 && !s.agents[agent]:
		return fmt.Sprintf("there is no agent %q", agent)
	case text == "":
		return "the ask is empty"
	case agent == ra.Agent:
		return fmt.Sprintf("%s cannot ask itself (it would wait on itself)", agent)
	}
	for cur := ra; !cur.DelegatedBy.IsZero(); {
		up, err := s.svc.GetTx(tx, cur.DelegatedBy)
		if err != nil {
			return fmt.Sprintf("the delegation chain is broken at %s: %v", cur.DelegatedBy, err)
		}
		if up.Agent == agent {
			return fmt.Sprintf("%s is up the delegation chain (%s waits on %s): asking it would deadlock", agent, up.ID, ra.ID)
		}
		cur = up
	}
	return ""
}

func (s *Service) auditRefusal(ctx context.Context, from requests.ID, cause error) {
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, from)
		if err != nil {
			return err
		}
		return audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: from.String(),
			Actor: "agent:" + r.Agent, Action: "call_refused", From: r.State.String(), To: r.State.String(),
			Detail: cause.Error()})
	})
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "auditing a refused call", "request_id", from.String(), "error", err)
	}
}

// Waiting reports whether request id has an open rendezvous (it asked an
// agent that has not answered) or an open background task. (Results that
// arrived during the turn that just yielded are the scheduler's to see:
// they sit in the request's inbox.)
func (s *Service) Waiting(ctx context.Context, id requests.ID) (bool, error) {
	waiting := false
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		open, err := s.openFromTx(tx, r)
		if err != nil {
			return err
		}
		tasks, err := s.waitTasksTx(tx, r)
		if err != nil {
			return err
		}
		waiting = len(open) > 0 || tasks
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("delegation: waiting %s: %w", id, err)
	}
	return waiting, nil
}

// waitTasksTx reports whether r has open background tasks and, if so,
// moves the rendezvous r answers to waiting_on_task: r's turn ending is
// not its answer.
func (s *Service) waitTasksTx(tx store.Tx, r *requests.Request) (bool, error) {
	n, err := s.openTasksTx(tx, r)
	if err != nil || n == 0 {
		return false, err
	}
	if r.DelegatedBy.IsZero() {
		return true, nil
	}
	_, err = s.transitionTx(tx, r, []string{Open}, WaitingOnTask, "")
	return true, err
}

// Get returns the rendezvous of delegated request rb.
func (s *Service) Get(ctx context.Context, rb requests.ID) (*Rendezvous, error) {
	var rv *Rendezvous
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, rb)
		if err != nil {
			return err
		}
		rv, err = getRV(tx, r)
		return err
	})
	return rv, err
}

func getRV(tx store.Tx, rb *requests.Request) (*Rendezvous, error) {
	var rv Rendezvous
	if err := store.GetJSON(tx, bucketRendezvous, rvKey(rb), &rv); err != nil {
		return nil, err
	}
	return &rv, nil
}

// openFromTx lists the open rendezvous of asker ra.
func (s *Service) openFromTx(tx store.Tx, ra *requests.Request) ([]Rendezvous, error) {
	var out []Rendezvous
	p := openPrefix(ra)
	err := tx.Scan(bucketOpen, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		var rv Rendezvous
		if err := store.GetJSON(tx, bucketRendezvous, ra.Owner+"/"+k[len(p):], &rv); err != nil {
			return err
		}
		out = append(out, rv)
		return nil
	})
	return out, err
}

// refreshWaitingTx sets what request ra waits on, for its thread's status
// line, from its open rendezvous: "waiting on R-08 (reviewer)", and while
// the delegated request's tasks run, "waiting on R-08 (reviewer) · task T-3
// running". Nothing open clears it. It is written in the transaction that
// changes a rendezvous or task, so it survives restarts and its status edit
// goes through the outbox.
func (s *Service) refreshWaitingTx(tx store.Tx, raID requests.ID) error {
	if s.threads == nil {
		return nil
	}
	ra, err := s.svc.GetTx(tx, raID)
	if err != nil {
		return err
	}
	open, err := s.openFromTx(tx, ra)
	if err != nil {
		return err
	}
	now := s.svc.Clock().Now()
	var parts []string
	for _, rv := range open {
		part := fmt.Sprintf("waiting on %s (%s)", shortRef(rv.To, now), rv.Agent)
		ids, err := taskIDsTx(tx, ra.Owner, rv.To)
		if err != nil {
			return err
		}
		switch {
		case rv.State != WaitingOnTask || len(ids) == 0:
		case len(ids) == 1:
			part += " · task " + ids[0] + " running"
		default:
			part += " · tasks " + strings.Join(ids, ", ") + " running"
		}
		parts = append(parts, part)
	}
	return s.threads.SetWaitingTx(tx, ra, strings.Join(parts, " · "))
}

// shortRef is id as a room reads it at now: R-08 for a request of now's UTC
// day, the full ID otherwise.
func shortRef(id requests.ID, now time.Time) string {
	if requests.NewID(now, id.Seq()) == id {
		return id.Short()
	}
	return id.String()
}

// transitionTx moves rb's rendezvous from one of states to state
// (compare-and-set). It returns the rendezvous as it was, or nil when rb
// has none or it was in another state (nothing changed).
func (s *Service) transitionTx(tx store.Tx, rb *requests.Request, from []string, state, reason string) (*Rendezvous, error) {
	rv, err := getRV(tx, rb)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ok := false
	for _, f := range from {
		ok = ok || rv.State == f
	}
	if !ok {
		return nil, nil
	}
	before := *rv
	rv.State, rv.Reason, rv.Updated = state, reason, s.svc.Clock().Now().UTC()
	if err := store.PutJSON(tx, bucketRendezvous, rvKey(rb), rv); err != nil {
		return nil, err
	}
	if !rv.IsOpen() {
		if err := tx.Delete(bucketOpen, rb.Owner+"/"+rv.From.Key()+"/"+rb.ID.Key()); err != nil {
			return nil, err
		}
		if !rv.Deadline.IsZero() {
			if err := store.RemoveTimer(tx, TimerKind, rv.Deadline, rvKey(rb)); err != nil {
				return nil, err
			}
		}
	}
	if err := s.refreshWaitingTx(tx, rv.From); err != nil {
		return nil, err
	}
	return &before, audit.Append(tx, audit.Record{Time: rv.Updated, RequestID: rv.From.String(), Actor: actor,
		Action: "rendezvous", From: before.State, To: state, Detail: rb.ID.String() + " " + reason})
}

// Observe is the request observer: a delegated request's end closes its
// rendezvous and answers the asker, or ends the background task it runs
// for; an asker's end cancels what it waits on.
func (s *Service) Observe(tx store.Tx, before, after *requests.Request) error {
	if before == nil || before.State.Terminal() || !after.State.Terminal() {
		return nil
	}
	if !after.DelegatedBy.IsZero() {
		if _, err := s.CompleteTx(tx, after); err != nil {
			return err
		}
		if err := s.endRunTx(tx, after); err != nil {
			return err
		}
	}
	if after.State == requests.Cancelled {
		if err := s.stopTasksTx(tx, after); err != nil {
			return err
		}
	}
	return s.cancelDelegatedTx(tx, after)
}

// CompleteTx closes the rendezvous of ended request rb with its outcome and
// delivers the answer to the asker's next turn. It reports whether it did:
// a rendezvous already closed is left as it is (a second completion is a
// no-op).
func (s *Service) CompleteTx(tx store.Tx, rb *requests.Request) (bool, error) {
	if !rb.State.Terminal() {
		return false, fmt.Errorf("delegation: complete %s: it is %s", rb.ID, rb.State)
	}
	state, text := Answered, rb.Result
	switch rb.State {
	case requests.Failed, requests.Expired:
		state, text = Failed, firstNonEmpty(rb.Reason, rb.Result, "failed")
	case requests.Cancelled:
		state, text = Cancelled, firstNonEmpty(rb.Reason, "cancelled")
		if rb.Result != "" {
			text += " (incomplete; done so far: " + rb.Result + ")"
		}
	}
	rv, err := s.transitionTx(tx, rb, []string{Open, WaitingOnTask}, state, rb.State.String())
	if err != nil || rv == nil {
		return false, err
	}
	err = agents.DeliverTx(tx, s.svc, rv.From, agents.Input{Kind: agents.InputAnswer, RequestID: rb.ID.String(),
		State: rb.State.String(), Text: text})
	if errors.Is(err, agents.ErrEnded) {
		return true, s.undeliveredTx(tx, rv.From, "the answer of "+rb.ID.String(), text)
	}
	return err == nil, err
}

// cancelDelegatedTx cancels the requests that ended request ra waits on:
// their rendezvous close as cancelled, running ones stop at their next safe
// point, queued ones end at once.
func (s *Service) cancelDelegatedTx(tx store.Tx, ra *requests.Request) error {
	open, err := s.openFromTx(tx, ra)
	if err != nil {
		return err
	}
	reason := fmt.Sprintf("cancelled: %s, which asked for it, ended (%s)", ra.ID, ra.State)
	for _, rv := range open {
		rb, err := s.svc.GetTx(tx, rv.To)
		if err != nil {
			return err
		}
		if _, err := s.transitionTx(tx, rb, []string{Open, WaitingOnTask}, Cancelled, reason); err != nil {
			return err
		}
		if err := s.cancelTx(tx, rb, reason); err != nil {
			return err
		}
	}
	return nil
}

// cancelTx cancels delegated request rb, whose rendezvous has closed: its
// tasks stop, a running rb stops at its next safe point, a queued one ends
// at once.
func (s *Service) cancelTx(tx store.Tx, rb *requests.Request, reason string) error {
	if err := s.stopTasksTx(tx, rb); err != nil {
		return err
	}
	var err error
	switch {
	case rb.State.Terminal():
	case rb.State == requests.Running:
		_, err = s.svc.UpdateTx(tx, rb.ID, actor, "cancel_requested", reason, func(r *requests.Request) {
			r.CancelRequested, r.Reason = true, reason
		})
	default:
		_, err = s.svc.ApplyTx(tx, rb.ID, requests.Change{Event: requests.Cancel, Actor: actor, Detail: reason,
			Mutate: func(r *requests.Request) { r.Reason = reason }})
	}
	return err
}

// Due returns up to limit rendezvous timeouts due at now (ttl.Expirer).
func (s *Service) Due(ctx context.Context, now time.Time, after store.Timer, limit int) ([]store.Timer, error) {
	due, err := store.Due(ctx, s.svc.Store(), TimerKind, now, after, limit)
	if err != nil {
		return nil, fmt.Errorf("delegation: due: %w", err)
	}
	return due, nil
}

// Expire times out the rendezvous of timer t if it is still open and due
// at now, in one transaction (ttl.Expirer): the asker gets a terminal
// "timed out" answer at its next turn and the delegated request is
// cancelled. A timer whose rendezvous closed meanwhile is removed.
func (s *Service) Expire(ctx context.Context, t store.Timer, now time.Time) (bool, error) {
	expired := false
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		expired = false
		var rv Rendezvous
		err := store.GetJSON(tx, bucketRendezvous, t.ID, &rv)
		if errors.Is(err, store.ErrNotFound) {
			return store.RemoveTimer(tx, t.Kind, t.Due, t.ID)
		}
		if err != nil {
			return err
		}
		if !rv.IsOpen() || !rv.Deadline.Equal(t.Due) {
			return store.RemoveTimer(tx, t.Kind, t.Due, t.ID)
		}
		if now.Before(rv.Deadline) {
			return nil
		}
		rb, err := s.svc.GetTx(tx, rv.To)
		if err != nil {
			return err
		}
		waited := rv.Deadline.Sub(rv.Created).Round(time.Second)
		reason := fmt.Sprintf("timed out: %s (%s) did not answer %s within %s", rb.ID, rv.Agent, rv.From, waited)
		if _, err := s.transitionTx(tx, rb, []string{Open, WaitingOnTask}, TimedOut, reason); err != nil {
			return err
		}
		if err := s.cancelTx(tx, rb, "cancelled: "+reason); err != nil {
			return err
		}
		expired = true
		err = agents.DeliverTx(tx, s.svc, rv.From, agents.Input{Kind: agents.InputAnswer, RequestID: rb.ID.String(),
			State: TimedOut, Text: reason + "; it is cancelled"})
		if errors.Is(err, agents.ErrEnded) {
			return s.undeliveredTx(tx, rv.From, "the timeout of "+rb.ID.String(), reason)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delegation: expire %s: %w", t.ID, err)
	}
	return expired, nil
}

// undeliveredTx records (audit, and a notice in its thread) what arrived
// for request id after it ended: never dropped silently.
func (s *Service) undeliveredTx(tx store.Tx, id requests.ID, what, text string) error {
	if err := audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: id.String(), Actor: actor,
		Action: "undelivered", Detail: what + " arrived after the request ended: " + clip.Text(text, 200, clip.Bytes)}); err != nil {
		return err
	}
	return s.noticeTx(tx, id, fmt.Sprintf("(%s arrived after this request ended: %s)", what, clip.Text(text, 500, clip.Bytes)))
}

// noticeTx posts a notice in request id's thread, if threads are set.
func (s *Service) noticeTx(tx store.Tx, id requests.ID, text string) error {
	if s.threads == nil {
		return nil
	}
	r, err := s.svc.GetTx(tx, id)
	if err != nil {
		return err
	}
	return s.threads.Reply(tx, r, chat.Message{Kind: "notice", Text: text})
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
