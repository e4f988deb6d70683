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

// ActionAsk is a permission an agent asks for during a run
// (request_approval in the exec protocol).
type ActionAsk struct {
	// RequestID is the running request whose agent asks.
	RequestID string
	// Action is what the agent wants to do, as people will read it.
	Action string
	// Asker labels who asks when it is not the request itself (a background
	// task: its name and ID). Default: Label of the request.
	Asker string
}

// Decision is the answer to an agent's ask: a permission's decision, or a
// question's answer.
type Decision struct {
	// Approval is the approval's (or question's) ID.
	Approval string    `json:"approval"`
	Kind     Kind      `json:"kind"`
	State    State     `json:"state"`
	By       string    `json:"by,omitempty"`
	Surface  string    `json:"surface,omitempty"`
	At       time.Time `json:"at,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	// Text is a question's answer (Answered only).
	Text string `json:"text,omitempty"`
}

// Approved reports whether the agent may go ahead.
func (d Decision) Approved() bool { return d.State == Approved }

// Answered reports whether a person answered the question.
func (d Decision) Answered() bool { return d.State == Answered }

// Answer is the decision as the agent is told it: "approved by X",
// "not approved: denied by X", "not approved: expired" (never a denial),
// "not approved: withdrawn (…)". For a question: the person's answer, or
// "no answer: expired (nobody answered in time)" (never an answer), or
// "no answer: withdrawn (…)".
func (d Decision) Answer() string {
	if d.Kind == KindQuestion {
		switch d.State {
		case Answered:
			return d.Text
		case Expired:
			return "no answer: expired (nobody answered in time)"
		case Withdrawn:
			return "no answer: withdrawn (" + d.Reason + ")"
		}
		return "not answered yet"
	}
	switch d.State {
	case Approved:
		return "approved by " + d.By
	case Denied:
		return "not approved: denied by " + d.By
	case Expired:
		return "not approved: expired"
	case Withdrawn:
		return "not approved: withdrawn (" + d.Reason + ")"
	}
	return "not decided yet"
}

func decisionOf(a *Approval) Decision {
	return Decision{Approval: a.ID, Kind: a.Kind, State: a.State, By: a.DecidedBy, Surface: a.Surface, At: a.DecidedAt,
		Reason: a.Reason, Text: a.Answer}
}

// RequestApproval asks the people of requestID's room to approve action,
// and blocks until someone decides, the approval expires, it is withdrawn
// (the request ended or its cancel was asked), or ctx ends. It is Ask with
// the request as the asker.
func (s *Service) RequestApproval(ctx context.Context, requestID, action string) (Decision, error) {
	return s.Ask(ctx, ActionAsk{RequestID: requestID, Action: action})
}

// Ask is Open then Wait.
func (s *Service) Ask(ctx context.Context, ask ActionAsk) (Decision, error) {
	a, err := s.Open(ctx, ask)
	if err != nil {
		return Decision{}, err
	}
	return s.Wait(ctx, a.ID)
}

// Open records the permission an agent asks for, with its expiry timer, inbox
// entry and cards, and returns it without waiting. The request must be
// running. If the same request already waits on the same action (a turn
// resumed after a restart asks again), that approval is returned instead of
// a second one.
func (s *Service) Open(ctx context.Context, ask ActionAsk) (*Approval, error) {
	return s.open(ctx, KindAction, ask)
}

// AskUser asks the people of requestID's room question (ask_user in the
// exec protocol), and blocks until someone answers it, it expires, it is
// withdrawn (the request ended or its cancel was asked), or ctx ends. It is
// OpenQuestion then Wait; the decision's Answer is what the agent is told.
func (s *Service) AskUser(ctx context.Context, requestID, question string) (Decision, error) {
	q, err := s.OpenQuestion(ctx, requestID, question)
	if err != nil {
		return Decision{}, err
	}
	return s.Wait(ctx, q.ID)
}

// OpenQuestion records a question the agent of running request requestID
// asks, with its expiry timer and inbox entry, shown in the request's thread
// and in its root's (labelled "reviewer asks: …"), and returns it
// without waiting. Its ID is the request's plus ".qn" (R20261129-08.q1). The
// same question asked again while it is open (a resumed turn) returns the
// open one.
func (s *Service) OpenQuestion(ctx context.Context, requestID, question string) (*Approval, error) {
	return s.open(ctx, KindQuestion, ActionAsk{RequestID: requestID, Action: question})
}

// open records an agent's ask of kind (KindAction or KindQuestion).
func (s *Service) open(ctx context.Context, kind Kind, ask ActionAsk) (*Approval, error) {
	call, seq, what, audited := "request_approval", "approval/", "the action to approve", "approval_requested"
	if kind == KindQuestion {
		call, seq, what, audited = "ask_user", "question/", "the question", "question_asked"
	}
	id, err := requests.ParseRef(ask.RequestID, s.now())
	if err != nil {
		return nil, fmt.Errorf("approvals: %s: %w", call, err)
	}
	action := strings.TrimSpace(ask.Action)
	if action == "" {
		return nil, fmt.Errorf("approvals: %s: %s is empty", call, what)
	}
	var out *Approval
	err = s.store.Update(ctx, func(tx store.Tx) error {
		out = nil
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		if r.State != requests.Running {
			return fmt.Errorf("%s is %s, not running", r.ID, r.State)
		}
		p := requestPrefix(id)
		if err := tx.Scan(bucketOpen, p, store.PrefixEnd(p), func(k string, _ []byte) error {
			a, err := getKeyTx(tx, k, k)
			if err != nil {
				return err
			}
			if a.Kind == kind && a.State == Pending && a.Action == action && (ask.Asker == "" || a.Asker == ask.Asker) {
				out = a
				return store.ErrStop
			}
			return nil
		}); err != nil && !errors.Is(err, store.ErrStop) {
			return err
		}
		if out != nil {
			return nil
		}
		n, err := store.NextSeq(tx, seq+id.Key())
		if err != nil {
			return err
		}
		asker := ask.Asker
		if asker == "" {
			asker = Label(r)
		}
		out, err = s.createTx(tx, r, int(n), kind, action, asker)
		if err != nil {
			return err
		}
		return audit.Append(tx, audit.Record{
			Time: out.Created, RequestID: r.ID.String(), Actor: "agent:" + r.Agent, Action: audited,
			To: string(Pending), Detail: noun(out) + " " + out.ID + " for " + asker + ": " + clip.Line(action, 200, clip.Bytes),
		})
	})
	if err != nil {
		return nil, fmt.Errorf("approvals: %s: %w", call, err)
	}
	return out, nil
}

// Wait blocks until approval id is settled and returns the decision, or
// returns ctx's error when ctx ends first (the approval stays pending).
func (s *Service) Wait(ctx context.Context, id string) (Decision, error) {
	wake, unsub := s.store.Subscribe(TopicApprovals)
	defer unsub()
	for {
		a, err := s.Get(ctx, id)
		if err != nil {
			return Decision{}, err
		}
		if a.State != Pending {
			return decisionOf(a), nil
		}
		select {
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		case <-wake:
		}
	}
}
