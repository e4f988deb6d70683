package approvals

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Questions (ask_user) are approvals of KindQuestion: stored, indexed,
// expired, withdrawn and shown (in the asking request's thread and its
// root's) by the same code; what differs is that a person answers them with
// text, by a reply in a thread where the question is shown (AnswerInThread)
// or by its ID (Answer), instead of approving or denying.

var (
	// ErrWrongKind: an approval was answered, or a question approved or
	// denied.
	ErrWrongKind = errors.New("wrong kind")
	// ErrBadAnswer: the answer is empty.
	ErrBadAnswer = errors.New("malformed answer")
)

// replyDedupeTTL is how long a platform's event ID of a reply that answered
// a question is remembered (as agents.ReplyEvent remembers those of
// follow-ups, under the same "reply:" key, so that a redelivered answer is
// never delivered again as a follow-up).
const replyDedupeTTL = 24 * time.Hour

// noun names what a is in audit details: "permission", "question" or
// "approval".
func noun(a *Approval) string {
	switch a.Kind {
	case KindQuestion:
		return "question"
	case KindAction:
		return "permission"
	}
	return "approval"
}

// MayAnswer reports whether user may answer question a: whoever may ask in
// its room, or in its root's room (the two rooms it is shown in).
func (s *Service) MayAnswer(a *Approval, user string) bool {
	for _, name := range a.inboxRooms() {
		if _, ok := s.rooms.Named(name); ok && s.rooms.MayAsk(name, user) {
			return true
		}
	}
	return s.rooms.MayRevoke(user)
}

// Answer answers question id (full or short form, R-08.q1) with text, by
// actor on surface, as a compare-and-set in one transaction: the first
// answer wins, and any later one is refused with a message naming who
// answered and when (ErrDecided). Refusals (a malformed or unknown ID, an
// empty answer, someone who may not answer, a settled question, an
// approval's ID) are audited and change nothing else — except an answer
// arriving after the TTL while the question is still open: the question
// expires then and there, and the answer is refused. The answer is audited
// (actor, surface), every copy of the question is updated, and the waiting
// agent call gets it.
func (s *Service) Answer(ctx context.Context, id, text, actor, surface string) (*Approval, error) {
	what := "answer " + id
	r, err := parseRef(id, s.now())
	if err != nil {
		return nil, s.refuseOutside(ctx, "", actor, surface, actionAnswerRefused, what, err)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, s.refuseOutside(ctx, r.req.String(), actor, surface, actionAnswerRefused, what,
			fmt.Errorf("%w: the answer to %s is empty", ErrBadAnswer, r))
	}
	var out *Approval
	var refused error
	err = s.store.Update(ctx, func(tx store.Tx) error {
		out, refused = nil, nil
		now := s.now()
		a, err := getTx(tx, r)
		if errors.Is(err, ErrUnknown) {
			refused = refuse(ErrUnknown, "no question %s", r)
			return auditRefusalTx(tx, now, r.req.String(), actor, surface, actionAnswerRefused, what, refused)
		}
		if err != nil {
			return err
		}
		out, refused, err = s.answerTx(tx, a, text, actor, surface, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: answer %s: %w", id, err)
	}
	if refused != nil {
		s.log.InfoContext(ctx, "answer refused", "question", r.String(), "request_id", r.req.String(),
			"user", actor, "surface", surface, "error", refused)
		return out, refused
	}
	return out, nil
}

// AnswerInThread answers, with a person's reply in the thread of request
// thread, the question open in that thread: the one whose ID the reply
// starts with ("R-08.q1: eu-west"), else the oldest. It returns nil, nil
// when no question is open there (the reply is a follow-up for the agent).
// eventKey ("slack:Ev1", or "") deduplicates a platform's redelivery: the
// same event again answers nothing and returns requests.ErrDuplicate.
// Refusals are audited, as by Answer.
func (s *Service) AnswerInThread(ctx context.Context, thread requests.ID, text, actor, surface, eventKey string) (*Approval, error) {
	text = strings.TrimSpace(text)
	var out *Approval
	var refused error
	err := s.store.Update(ctx, func(tx store.Tx) error {
		out, refused = nil, nil
		now := s.now()
		open, err := threadQuestionsTx(tx, thread)
		if err != nil || len(open) == 0 {
			return err
		}
		if eventKey != "" {
			fresh, err := store.Dedupe(tx, "reply:"+eventKey, now, replyDedupeTTL)
			if err != nil {
				return err
			}
			if !fresh {
				refused = requests.ErrDuplicate
				return nil
			}
		}
		q, answer := open[0], text
		if first, rest, _ := strings.Cut(text, " "); first != "" {
			if r, err := parseRef(strings.TrimRight(first, ":,"), now); err == nil && r.q {
				for _, a := range open {
					if a.ID == r.String() {
						q, answer = a, strings.TrimSpace(rest)
					}
				}
			}
		}
		if answer == "" {
			refused = fmt.Errorf("%w: the answer to %s is empty", ErrBadAnswer, q.ID)
			return auditRefusalTx(tx, now, q.RequestID.String(), actor, surface, actionAnswerRefused, "answer "+q.ID, refused)
		}
		out, refused, err = s.answerTx(tx, q, answer, actor, surface, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: answer in the thread of %s: %w", thread, err)
	}
	if refused != nil {
		if !errors.Is(refused, requests.ErrDuplicate) {
			s.log.InfoContext(ctx, "answer refused", "thread", thread.String(), "user", actor,
				"surface", surface, "error", refused)
		}
		return out, refused
	}
	return out, nil
}

// threadQuestionsTx returns the open questions shown in the thread of
// request thread, oldest first.
func threadQuestionsTx(tx store.Tx, thread requests.ID) ([]*Approval, error) {
	var out []*Approval
	p := thread.Key() + "/"
	err := tx.Scan(bucketThreadQuestions, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		_, key, ok := strings.Cut(strings.TrimPrefix(k, p), "/")
		if !ok {
			return fmt.Errorf("corrupt thread question key %q", k)
		}
		a, err := getKeyTx(tx, key, key)
		if err != nil {
			return err
		}
		if a.State == Pending {
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: questions in the thread of %s: %w", thread, err)
	}
	return out, nil
}

// OpenQuestions returns the open questions shown in the thread of request
// thread (its own and those of work delegated under it), oldest first.
func (s *Service) OpenQuestions(ctx context.Context, thread requests.ID) ([]*Approval, error) {
	var out []*Approval
	err := s.store.View(ctx, func(tx store.Tx) error {
		var err error
		out, err = threadQuestionsTx(tx, thread)
		return err
	})
	return out, err
}

// answerTx is Answer on approval a inside tx. It returns the question as it
// now is, and a refusal (with its audit record written) or nil.
func (s *Service) answerTx(tx store.Tx, a *Approval, text, actor, surface string, now time.Time) (*Approval, error, error) {
	what := "answer " + a.ID
	refused := func(why error) (*Approval, error, error) {
		return a, why, auditRefusalTx(tx, now, a.RequestID.String(), actor, surface, actionAnswerRefused, what, why)
	}
	if a.Kind != KindQuestion {
		return refused(refuse(ErrWrongKind, "%s is not a question: approve %s or deny %s", a.ID, a.ID, a.ID))
	}
	if !s.MayAnswer(a, actor) {
		return refused(refuse(ErrForbidden, "%s may not answer %s: only the members and approvers of room %s and the owners may",
			actor, a.ID, a.Room))
	}
	switch {
	case a.State == Pending && now.Before(a.ExpiresAt):
	case a.State == Pending:
		// Late: the TTL passed and the sweeper has not come by yet.
		expired, err := s.expireNowTx(tx, a, now)
		if err != nil {
			return nil, nil, err
		}
		a = expired
		return refused(settledRefusal(expired, now))
	default:
		return refused(settledRefusal(a, now))
	}
	after, err := settleTx(tx, a, Answered, actor, surface, text, now)
	if err != nil {
		return nil, nil, err
	}
	return after, nil, audit.Append(tx, audit.Record{
		Time: now, RequestID: a.RequestID.String(), Actor: actor, Surface: surface, Action: "question_answered",
		From: string(Pending), To: string(Answered),
		Detail: "question " + a.ID + " (" + clip.Line(a.Action, 100, clip.Bytes) + "): " + clip.Line(text, 200, clip.Bytes),
	})
}
