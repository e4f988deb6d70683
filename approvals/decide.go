package approvals

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Verdict is what a person decides. Its values are the action IDs of the
// card's buttons.
type Verdict string

// Verdicts.
const (
	Approve Verdict = "approve"
	Deny    Verdict = "deny"
)

// ParseVerdict parses "approve" or "deny".
func ParseVerdict(s string) (Verdict, error) {
	switch v := Verdict(s); v {
	case Approve, Deny:
		return v, nil
	}
	return "", fmt.Errorf("unknown decision %q (want approve or deny)", s)
}

// state is the approval state a verdict leads to.
func (v Verdict) state() State {
	if v == Approve {
		return Approved
	}
	return Denied
}

// refusal is an error meant for the person refused; it wraps the package
// error that classifies it.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Decide settles approval id (full or short form) with v, by actor on
// surface, as a compare-and-set in one store transaction: the first decision
// wins; the same decision replayed is a no-op that succeeds; a conflicting or
// late one is refused with a message naming who decided and when, and so is
// a decision by someone who may not decide. Every refusal is audited and
// changes nothing else — except a decision arriving after the TTL while the
// approval is still pending: the approval expires then and there (the
// sweeper had not come by yet), and the decision is refused.
//
// Deciding a request's approval moves the request (approve → approved; deny
// → cancelled, "denied by X"), with its audit record, in the same
// transaction; every copy of the card is updated through the outbox.
func (s *Service) Decide(ctx context.Context, id string, v Verdict, actor, surface string) (*Approval, error) {
	return s.decide(ctx, id, v, actor, surface, 0)
}

// decide is Decide by a click on the card of version shown (0: not a
// click): a click on a card the approval has changed since while it waits
// (its request's ask was edited: askEditedTx) is refused, so that nobody
// approves a text they were not shown.
func (s *Service) decide(ctx context.Context, id string, v Verdict, actor, surface string, shown int64) (*Approval, error) {
	r, err := parseRef(id, s.now())
	if err != nil {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionDecisionRefused, fmt.Sprintf("%s %s", v, id), err)
	}
	var out *Approval
	var refused error
	err = s.store.Update(ctx, func(tx store.Tx) error {
		out, refused = nil, nil
		now := s.now()
		a, err := getTx(tx, r)
		if errors.Is(err, ErrUnknown) {
			refused = err
			if req, rerr := s.svc.GetTx(tx, r.req); rerr == nil && r.n == 0 {
				refused = fmt.Errorf("%w: %s did not wait for approval (asked by %s, now %s)", err, req.ID, req.Requester, req.State)
			}
			return auditRefusalTx(tx, now, r.req.String(), actor, surface, actionDecisionRefused, fmt.Sprintf("%s %s", v, r), refused)
		}
		if err != nil {
			return err
		}
		if shown > 0 && shown < a.Version && a.State == Pending {
			refused = refuse(ErrStale, "%s's ask was edited after this card was shown: look at its card again, then decide", a.ID)
			out = a
			return auditRefusalTx(tx, now, a.RequestID.String(), actor, surface, actionDecisionRefused, fmt.Sprintf("%s %s", v, a.ID), refused)
		}
		out, refused, err = s.decideTx(tx, a, v, actor, surface, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: %s %s: %w", v, id, err)
	}
	if refused != nil {
		s.log.InfoContext(ctx, "decision refused", "approval", r.String(), "request_id", r.req.String(),
			"user", actor, "surface", surface, "verdict", string(v), "error", refused)
		return out, refused
	}
	return out, nil
}

// Click settles the approval that a card's button decides: the block ID
// names the approval (as rendered by Card), the action ID the verdict. A
// malformed click is refused and audited like any other refusal.
func (s *Service) Click(ctx context.Context, c *chat.ClickAction, actor, surface string) (*Approval, error) {
	if c == nil {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionDecisionRefused, "click", errors.New("the click carries no button"))
	}
	id, shown, ok := parseBlockID(c.BlockID)
	if !ok || c.Value != id {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionDecisionRefused, "click",
			fmt.Errorf("the button (block %q, value %q) does not decide an approval", c.BlockID, c.Value))
	}
	v, err := ParseVerdict(c.ActionID)
	if err != nil {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionDecisionRefused, "click "+id, err)
	}
	return s.decide(ctx, id, v, actor, surface, shown)
}

// decideTx is Decide on approval a inside tx. It returns the approval as it
// now is, and a refusal (with its audit record written) or nil.
func (s *Service) decideTx(tx store.Tx, a *Approval, v Verdict, actor, surface string, now time.Time) (*Approval, error, error) {
	what := fmt.Sprintf("%s %s", v, a.ID)
	if a.Kind == KindQuestion {
		ref := refuse(ErrWrongKind, "%s is a question, not an approval: answer it by a reply in its thread, or: answer %s <text>", a.ID, a.ID)
		return a, ref, auditRefusalTx(tx, now, a.RequestID.String(), actor, surface, actionDecisionRefused, what, ref)
	}
	if !s.rooms.MayDecide(a.Room, actor) {
		ref := refuse(ErrForbidden, "%s may not approve or deny in room %s: only its approvers and the owners may", actor, a.Room)
		return a, ref, auditRefusalTx(tx, now, a.RequestID.String(), actor, surface, actionDecisionRefused, what, ref)
	}
	switch {
	case a.State == Pending && now.Before(a.ExpiresAt):
	case a.State == Pending:
		// Late: the TTL passed and the sweeper has not come by yet.
		expired, err := s.expireNowTx(tx, a, now)
		if err != nil {
			return nil, nil, err
		}
		ref := settledRefusal(expired, now)
		return expired, ref, auditRefusalTx(tx, now, a.RequestID.String(), actor, surface, actionDecisionRefused, what, ref)
	case a.State == v.state():
		return a, nil, nil // the same decision replayed: nothing to do
	default:
		ref := settledRefusal(a, now)
		return a, ref, auditRefusalTx(tx, now, a.RequestID.String(), actor, surface, actionDecisionRefused, what, ref)
	}
	after, err := settleTx(tx, a, v.state(), actor, surface, "", now)
	if err != nil {
		return nil, nil, err
	}
	if a.Kind == KindRequest {
		c := requests.Change{Event: requests.Approve, Actor: actor, Surface: surface, Detail: "approval " + a.ID}
		if v == Deny {
			reason := "denied by " + actor
			c.Event, c.Detail = requests.Deny, reason
			c.Mutate = func(r *requests.Request) { r.Reason = reason }
		}
		if _, err := s.svc.ApplyTx(tx, a.RequestID, c); err != nil {
			return nil, nil, err
		}
		return after, nil, nil
	}
	return after, nil, audit.Append(tx, audit.Record{
		Time: now, RequestID: a.RequestID.String(), Actor: actor, Surface: surface, Action: string(v),
		From: string(Pending), To: string(after.State), Detail: "permission " + a.ID + ": " + clip.Line(a.Action, 200, clip.Bytes),
	})
}

// settledRefusal tells someone deciding (or answering) a settled approval
// (or question) who settled it, how, and when.
func settledRefusal(a *Approval, now time.Time) error {
	switch {
	case a.State == Answered:
		return refuse(ErrDecided, "%s was already answered by %s at %s", a.ID, a.DecidedBy, stamp(a.DecidedAt, now))
	case a.State == Expired && a.Kind == KindQuestion:
		return refuse(ErrDecided, "%s expired at %s: nobody answered within %s — the agent was told: no answer", a.ID, stamp(a.DecidedAt, now), Duration(a.TTL))
	}
	switch a.State {
	case Expired:
		next := "retry " + retryRef(a) + " to ask again"
		if a.Kind == KindAction {
			next = "the agent was told: not approved"
		}
		return refuse(ErrDecided, "%s expired at %s: nobody decided within %s — %s", a.ID, stamp(a.DecidedAt, now), Duration(a.TTL), next)
	case Withdrawn:
		return refuse(ErrDecided, "%s was withdrawn at %s: %s", a.ID, stamp(a.DecidedAt, now), a.Reason)
	}
	return refuse(ErrDecided, "%s was already %s by %s at %s", a.ID, a.State, a.DecidedBy, stamp(a.DecidedAt, now))
}

// Audit actions of refusals.
const (
	actionDecisionRefused = "decision_refused"
	actionAnswerRefused   = "answer_refused"
)

func auditRefusalTx(tx store.Tx, now time.Time, requestID, actor, surface, action, what string, why error) error {
	return audit.Append(tx, audit.Record{
		Time: now, RequestID: requestID, Actor: actor, Surface: surface, Action: action,
		Detail: what + ": " + why.Error(),
	})
}

// refuseOutside audits a refusal that needs no transaction of its own, and
// returns it.
func (s *Service) refuseOutside(ctx context.Context, requestID, actor, surface, action, what string, why error) error {
	err := s.store.Update(ctx, func(tx store.Tx) error {
		return auditRefusalTx(tx, s.now(), requestID, actor, surface, action, what, why)
	})
	if err != nil {
		s.log.ErrorContext(ctx, "auditing a refused decision", "error", err)
	}
	s.log.InfoContext(ctx, strings.ReplaceAll(action, "_", " "), "user", actor, "surface", surface, "what", what, "error", why)
	return why
}

// Due returns up to limit approval timers due at now, earliest first, read
// from the store's expiry index (never a scan of all approvals). It and
// Expire make the Service a ttl.Expirer.
func (s *Service) Due(ctx context.Context, now time.Time, after store.Timer, limit int) ([]store.Timer, error) {
	due, err := store.Due(ctx, s.store, TimerKind, now, after, limit)
	if err != nil {
		return nil, fmt.Errorf("approvals: due: %w", err)
	}
	return due, nil
}
