// Package approvals keeps what people must decide or answer: an approval
// before a non-owner's request runs, a permission an agent asks for during a
// run, and a question an agent asks a person during a run (ask_user). It
// renders their cards, settles decisions and answers from any surface as a
// compare-and-set in the store (the first one wins), says who may decide or
// answer, expires them through the store's expiry index (driven by package
// ttl), revokes a user's waiting requests, and lists a room's inbox.
//
// Work delegated by another request belongs to the conversation a person
// started, the root of the delegation chain (docs/design.md §3): its cards and
// questions are shown in the root request's thread too, labelled with the
// request that asks, and listed in the root room's inbox.
package approvals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// Store buckets, timer kind and notification topic of this package.
const (
	bucketApprovals = "approvals"
	// bucketInbox indexes pending approvals by room, oldest first:
	// <escaped room>/<created unix ms>/<approval key>.
	bucketInbox = "approvals_inbox"
	// bucketOpen indexes pending approvals by request (<approval key>), so
	// that a request's end finds its open approvals without decoding the
	// settled ones.
	bucketOpen = "approvals_open"
	// bucketThreadQuestions indexes open questions by the threads they are
	// shown in (the asking request's and its root's), oldest first:
	// <request key>/<created unix ms>/<approval key>. A reply in one of
	// those threads answers the oldest.
	bucketThreadQuestions = "approvals_thread_questions"

	// TimerKind is the kind of the approvals' entries in the expiry index.
	TimerKind = "approval"

	// TopicApprovals is notified whenever an approval is created or settled.
	// (One topic for all: a topic per approval would make a transaction that
	// touches many approvals notify many topics.)
	TopicApprovals = "approvals"
)

// ActorTTL is how expiries appear in the audit log.
const ActorTTL = "system:ttl"

// actorApprovals is how withdrawals appear in the audit log.
const actorApprovals = "system:approvals"

// Kind says what an approval is about.
type Kind string

// Kinds of approval.
const (
	// KindRequest: a request waits for it before it runs.
	KindRequest Kind = "request"
	// KindAction: an agent asked permission for an action during a run.
	KindAction Kind = "action"
	// KindQuestion: an agent asked a person a question during a run
	// (ask_user). It is answered, not approved or denied.
	KindQuestion Kind = "question"
)

// State is an approval's state. Values are persisted.
type State string

// Approval states. Only Pending can change.
const (
	// Pending: waiting for a decision.
	Pending State = "pending"
	// Approved: someone who may decide said yes.
	Approved State = "approved"
	// Denied: someone who may decide said no.
	Denied State = "denied"
	// Expired: nobody decided within the TTL. Never a denial.
	Expired State = "expired"
	// Withdrawn: the request ended, or its cancel was asked, before anyone
	// decided.
	Withdrawn State = "withdrawn"
	// Answered: someone who may answer answered the question.
	Answered State = "answered"
)

// Approval is one decision a person must take, or one question a person
// must answer (Kind KindQuestion).
type Approval struct {
	// ID is the request's ID for the approval a request needs before it
	// runs (R20261129-07), the request's ID plus ".n" for the n-th
	// permission its agent asked for (R20261129-07.1), and plus ".qn" for
	// the n-th question it asked (R20261129-07.q1).
	ID        string      `json:"id"`
	Kind      Kind        `json:"kind"`
	RequestID requests.ID `json:"request_id"`
	// Root is the request at the root of the delegation chain, when it is
	// not RequestID itself: the card shows in its thread and inbox too.
	Root     requests.ID `json:"root,omitzero"`
	RootRoom string      `json:"root_room,omitempty"`
	Room     string      `json:"room"`
	Agent    string      `json:"agent"`
	// Requester is who asked the request.
	Requester string `json:"requester"`
	// Action is what is to be approved: the ask, or the agent's action; or
	// the question asked.
	Action string `json:"action"`
	// Asker labels who asks: the request (or background task) by name and ID.
	Asker   string `json:"asker"`
	State   State  `json:"state"`
	Version int64  `json:"version"`
	// DecidedBy is the person (surface:id) who decided or answered, or
	// system:ttl.
	DecidedBy string    `json:"decided_by,omitempty"`
	Surface   string    `json:"surface,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Answer is a question's answer (Answered only; never set by an expiry).
	Answer string `json:"answer,omitempty"`
	// Reason says why an approval was withdrawn.
	Reason    string        `json:"reason,omitempty"`
	Created   time.Time     `json:"created"`
	ExpiresAt time.Time     `json:"expires_at"`
	TTL       time.Duration `json:"ttl"`
	// ShownAt is the time the card tells the time left as of (zero:
	// Created); NoticeAt is the due time of its notice timer (zero: none);
	// RemindedAt is the time of the latest reminder sent (notice.go).
	ShownAt    time.Time `json:"shown_at,omitzero"`
	NoticeAt   time.Time `json:"notice_at,omitzero"`
	RemindedAt time.Time `json:"reminded_at,omitzero"`
	// Link is the request's web page, an "Open" field on the card ("":
	// none).
	Link string `json:"link,omitempty"`
	// Copies are the posted copies of the card, all updated on a decision.
	Copies []Copy `json:"copies,omitempty"`
}

// Copy is one posted copy of an approval's card: the outbox name of the
// message on a surface, and the request whose delivery queue posted it.
type Copy struct {
	Surface string `json:"surface"`
	Request string `json:"request"`
	Ref     string `json:"ref"`
}

// ref is a parsed approval ID.
type ref struct {
	req requests.ID
	n   int
	q   bool // a question (R-07.q1), not a permission
}

// tag is what follows the dot: "1" or "q1".
func (r ref) tag() string {
	if r.q {
		return "q" + strconv.Itoa(r.n)
	}
	return strconv.Itoa(r.n)
}

func (r ref) String() string {
	if r.n == 0 {
		return r.req.String()
	}
	return r.req.String() + "." + r.tag()
}

// key is the approval's store key: its request's approvals are one range.
func (r ref) key() string {
	n := strconv.Itoa(r.n)
	if len(n) < 4 {
		n = "0000"[len(n):] + n
	}
	if r.q {
		n = "q" + n
	}
	return r.req.Key() + "/" + n
}

func requestPrefix(id requests.ID) string { return id.Key() + "/" }

// Errors of the package. Refusals wrap one of them with a message meant for
// the person refused.
var (
	// ErrBadID: the text is not an approval ID.
	ErrBadID = errors.New("malformed approval ID")
	// ErrUnknown: no approval has this ID.
	ErrUnknown = errors.New("unknown approval")
	// ErrForbidden: the actor may not do this.
	ErrForbidden = errors.New("not allowed")
	// ErrDecided: the approval was settled already (decided, expired or
	// withdrawn) in a different way.
	ErrDecided = errors.New("already decided")
	// ErrUnknownRoom: no room has this name.
	ErrUnknownRoom = errors.New("unknown room")
	// ErrBadUser: the text is not a user (surface:id).
	ErrBadUser = errors.New("malformed user")
	// ErrStale: a click on a card of an approval that changed since it
	// was shown (its request's ask was edited).
	ErrStale = errors.New("stale card")
)

// ParseID parses an approval ID: a request ID, full or short (R-07, today's),
// optionally followed by ".n" for the n-th permission asked during its run,
// or ".qn" for the n-th question asked. It returns the canonical form.
func ParseID(s string, today time.Time) (string, error) {
	r, err := parseRef(s, today)
	if err != nil {
		return "", err
	}
	return r.String(), nil
}

func parseRef(s string, today time.Time) (ref, error) {
	s = strings.TrimSpace(s)
	head, tail, hasN := strings.Cut(s, ".")
	id, err := requests.ParseRef(head, today)
	if err != nil {
		return ref{}, fmt.Errorf("%w: %q (want a request ID like R-07 or R20261129-07, R-07.1 for a permission asked during its run, or R-07.q1 for a question)", ErrBadID, s)
	}
	r := ref{req: id}
	if hasN {
		digits, q := strings.CutPrefix(tail, "q")
		n, err := strconv.Atoi(digits)
		if err != nil || n < 1 || strconv.Itoa(n) != digits {
			return ref{}, fmt.Errorf("%w: %q (the number after the dot, or after .q for a question, counts from 1)", ErrBadID, s)
		}
		r.n, r.q = n, q
	}
	return r, nil
}

// Options configure a Service.
type Options struct {
	// Requests is the request service (required): its store, clock and owners.
	Requests *requests.Service
	// Rooms is the room directory (required): approvers, per-room TTLs,
	// who may ask and decide, and the running surfaces (approvers on them
	// get the card as a direct message).
	Rooms *directory.Rooms
	// TTL is how long an approval waits (default config.DefaultTTL); a
	// room's approval_ttl overrides it.
	TTL time.Duration
	// Threads places cards in request threads (nil: no thread cards).
	Threads *threads.Threads
	// Remind are the times before the expiry at which the approvers who
	// have not decided are reminded (config approvals.remind; nil: none).
	Remind []time.Duration
	// Log defaults to discarding.
	Log *slog.Logger
}

// Service keeps approvals in the store of a requests.Service.
type Service struct {
	svc     *requests.Service
	store   store.Store
	clock   clock.Clock
	rooms   *directory.Rooms
	ttl     time.Duration
	remind  []time.Duration
	threads *threads.Threads
	log     *slog.Logger
	// Links, if set, gives the web page of a request ("": none): cards
	// carry it as an "Open" field.
	Links func(id string) string
	// onRevoke ends what else a revoke ends (OnRevoke).
	onRevoke []func(ctx context.Context, user string) error
	// renderInSweep: the sweeper's expiries render their thread's effects
	// at once, not at delivery (tests: RenderInSweep).
	renderInSweep bool
	// reads holds a token for each sweep batch reading (sweepReads; nil:
	// no bound).
	reads chan struct{}
}

// New returns a Service. Register its Observe with the requests service,
// after the threads observer (a card is a reply in a thread that must be
// started first).
func New(o Options) *Service {
	s := &Service{
		svc: o.Requests, store: o.Requests.Store(), clock: o.Requests.Clock(),
		rooms: o.Rooms, ttl: o.TTL, remind: o.Remind, threads: o.Threads, log: o.Log,
	}
	s.reads = sweepReads(s.store)
	if s.ttl <= 0 {
		s.ttl = config.DefaultTTL
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.threads != nil {
		s.threads.SetExpander(expandExpired, s.expandExpiredTx)
	}
	return s
}

func (s *Service) now() time.Time { return s.clock.Now().UTC() }

// ttlFor is the approval TTL of room.
func (s *Service) ttlFor(room string) time.Duration {
	if t := s.rooms.ApprovalTTL(room); t > 0 {
		return t
	}
	return s.ttl
}

// Get returns approval id (full or short form).
func (s *Service) Get(ctx context.Context, id string) (*Approval, error) {
	r, err := parseRef(id, s.now())
	if err != nil {
		return nil, err
	}
	var a *Approval
	err = s.store.View(ctx, func(tx store.Tx) error {
		var err error
		a, err = getTx(tx, r)
		return err
	})
	return a, err
}

// ObserverName is the name Observe is added under (requests.Service
// AddObserver), which a requests.Change skips it by.
const ObserverName = "approvals"

// Observe is a requests.Observer: a request created pending gets its
// approval (record, expiry timer, cards) in the transaction that creates it;
// a request that ends, or whose cancel is asked, withdraws its pending
// approvals (so a waiting agent hears "not approved" and no card keeps its
// buttons).
func (s *Service) Observe(tx store.Tx, before, after *requests.Request) error {
	switch {
	case before == nil && after.State == requests.Pending:
		_, err := s.createTx(tx, after, 0, KindRequest, after.Ask, Label(after))
		return err
	case before == nil:
		return nil
	case after.State.Terminal() && !before.State.Terminal():
		return s.withdrawTx(tx, after, ended(after))
	case after.CancelRequested && !before.CancelRequested:
		return s.withdrawTx(tx, after, "the request's cancel was asked")
	case after.State == requests.Pending && after.Ask != before.Ask:
		return s.askEditedTx(tx, after)
	}
	return nil
}

// askEditedTx shows the edited ask of pending request r on its approval's
// cards (a new version: a new block_id, as Block Kit wants of a changed
// card), so that approvers decide on what will run.
func (s *Service) askEditedTx(tx store.Tx, r *requests.Request) error {
	a, err := getTx(tx, ref{req: r.ID})
	if errors.Is(err, ErrUnknown) {
		return nil
	}
	if err != nil || a.State != Pending {
		return err
	}
	after := *a
	after.Action, after.Version = r.Ask, a.Version+1
	if err := updateCardsTx(tx, &after, Card(&after)); err != nil {
		return err
	}
	return putTx(tx, a, &after, nil)
}

// ended says how a request ended, for a withdrawn approval's card.
func ended(r *requests.Request) string {
	switch r.State {
	case requests.Done:
		return "the request finished"
	case requests.Failed:
		return "the request failed"
	case requests.Expired:
		return "the request expired"
	}
	if r.Reason != "" {
		return "the request was cancelled (" + r.Reason + ")"
	}
	return "the request was cancelled"
}

// Label names a request as its approvals show who asks:
// "R20261129-07 · coder".
func Label(r *requests.Request) string { return r.ID.String() + " · " + r.Agent }

// createTx makes approval n of request r (question n, for KindQuestion),
// with its expiry timer, inbox entry and cards.
func (s *Service) createTx(tx store.Tx, r *requests.Request, n int, kind Kind, action, asker string) (*Approval, error) {
	// Whole milliseconds: the expiry index keys by millisecond, so an
	// approval is due exactly when its timer is.
	now := s.now().Truncate(time.Millisecond)
	ttl := s.ttlFor(r.Room)
	a := &Approval{
		ID: ref{req: r.ID, n: n, q: kind == KindQuestion}.String(), Kind: kind, RequestID: r.ID, Room: r.Room, Agent: r.Agent,
		Requester: r.Requester, Action: action, Asker: asker, State: Pending, Version: 1,
		Created: now, ExpiresAt: now.Add(ttl), TTL: ttl,
	}
	a.NoticeAt = s.nextNotice(a, now)
	root, err := s.rootTx(tx, r)
	if err != nil {
		return nil, err
	}
	if root != nil {
		a.Root, a.RootRoom = root.ID, root.Room
	}
	if err := s.postCardsTx(tx, a, r, root); err != nil {
		return nil, err
	}
	if err := putTx(tx, nil, a, nil); err != nil {
		return nil, err
	}
	return a, nil
}

// maxDelegationDepth bounds the walk to a delegation chain's root.
const maxDelegationDepth = 64

// rootTx returns the root of r's delegation chain, or nil if r is its own.
func (s *Service) rootTx(tx store.Tx, r *requests.Request) (*requests.Request, error) {
	var root *requests.Request
	cur := r
	for i := 0; i < maxDelegationDepth && !cur.DelegatedBy.IsZero(); i++ {
		up, err := s.svc.GetTx(tx, cur.DelegatedBy)
		if err != nil {
			return nil, fmt.Errorf("approvals: root of %s: %w", r.ID, err)
		}
		root, cur = up, up
	}
	return root, nil
}

// postCardsTx queues the card in the asking request's thread, in its root's
// thread, and (not for a question, which is answered by a reply in a
// thread) to each of the room's approvers on a surface with a running
// connector, recording every copy in a.Copies.
func (s *Service) postCardsTx(tx store.Tx, a *Approval, r, root *requests.Request) error {
	if s.Links != nil {
		a.Link = s.Links(a.RequestID.String())
	}
	m := Card(a)
	post := func(e threads.Effect) error {
		e.Message = m
		if err := threads.Enqueue(tx, e); err != nil {
			return err
		}
		a.Copies = append(a.Copies, Copy{Surface: e.Surface, Request: e.Request, Ref: e.Save})
		return nil
	}
	if s.threads != nil {
		if surface, _, ok := s.threads.Place(r); ok {
			if err := post(threads.Effect{Op: threads.OpReply, Request: r.ID.String(), Surface: surface,
				Save: "approval/" + a.ID + "/thread"}); err != nil {
				return err
			}
		}
		if root != nil {
			if surface, _, ok := s.threads.Place(root); ok {
				if err := post(threads.Effect{Op: threads.OpReply, Request: root.ID.String(), Surface: surface,
					Save: "approval/" + a.ID + "/root"}); err != nil {
					return err
				}
			}
		}
	}
	for _, u := range s.dmApprovers(a) {
		surface, id, _ := strings.Cut(u, ":")
		if err := post(threads.Effect{Op: threads.OpDirect, Request: r.ID.String(), Surface: surface, User: id,
			Save: "approval/" + a.ID + "/dm/" + u}); err != nil {
			return err
		}
	}
	return nil
}

// withdrawTx withdraws the pending approvals of request r, found through
// the open index (usually empty: nothing is decoded).
func (s *Service) withdrawTx(tx store.Tx, r *requests.Request, why string) error {
	var keys []string
	p := requestPrefix(r.ID)
	if err := tx.Scan(bucketOpen, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		return fmt.Errorf("approvals: withdraw for %s: %w", r.ID, err)
	}
	now := s.now()
	for _, k := range keys {
		a, err := getKeyTx(tx, k, k)
		if err != nil {
			return err
		}
		if a.State != Pending {
			continue
		}
		if _, err := settleTx(tx, a, Withdrawn, actorApprovals, "", why, now); err != nil {
			return err
		}
		action := "approval_withdrawn"
		if a.Kind == KindQuestion {
			action = "question_withdrawn"
		}
		if err := audit.Append(tx, audit.Record{
			Time: now, RequestID: r.ID.String(), Actor: actorApprovals, Action: action,
			From: string(Pending), To: string(Withdrawn), Detail: a.ID + ": " + why,
		}); err != nil {
			return err
		}
	}
	return nil
}
