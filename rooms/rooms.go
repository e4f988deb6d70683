// Package rooms is where a surface meets the core: it resolves which room,
// agent and user an inbound chat event is about, checks who may do what, and
// routes it (an ask becomes a request, a command or click a decision).
package rooms

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// ErrForbidden: the actor may not do this (the same error as
// approvals.ErrForbidden, so either package's refusals match it).
var ErrForbidden = approvals.ErrForbidden

// conflict is a refusal of a transition the request's state does not allow
// (cancel of an ended request, retry of one still going): its message as
// is, matching requests.ErrIllegalTransition (HTTP 409).
type conflict string

func (c conflict) Error() string { return string(c) }
func (c conflict) Unwrap() error { return requests.ErrIllegalTransition }

// Router routes inbound events and carries out the actions people take, from
// chat, the HTTP API or the CLI alike.
type Router struct {
	svc   *requests.Service
	appr  *approvals.Service
	rooms *directory.Rooms
	tasks Tasks
	log   *slog.Logger

	// OnInbound, if set, is told of every event Handle gets: its surface,
	// kind, and whether it was dropped as a duplicate (metrics).
	OnInbound func(surface string, kind chat.EventKind, duplicate bool)
	// SignIn, if set, answers the "web" command: it sends user (who typed
	// it on surface) a sign-in link to the web room.
	SignIn func(ctx context.Context, user, surface string) (string, error)

	refusals Refusals
}

// New returns a Router over the room directory rooms; decisions go through
// appr, the "tasks" and "dismiss" commands through tasks (nil: there are no
// background tasks).
func New(svc *requests.Service, appr *approvals.Service, rooms *directory.Rooms, tasks Tasks, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Router{svc: svc, appr: appr, rooms: rooms, tasks: tasks, log: log}
}

// Approvals returns the approvals service decisions go through.
func (rt *Router) Approvals() *approvals.Service { return rt.appr }

// Room returns the room a surface channel is bound to.
func (rt *Router) Room(surface, channel string) (config.Room, bool) {
	return rt.rooms.Room(surface, channel)
}

// RoomNamed returns the room called name.
func (rt *Router) RoomNamed(name string) (config.Room, bool) { return rt.rooms.Named(name) }

// Duplicate counts a redelivery of ev that its connector answered as
// before, without calling Handle (internal/handled).
func (rt *Router) Duplicate(ev chat.Event) {
	if rt.OnInbound != nil {
		rt.OnInbound(ev.Surface, ev.Kind, true)
	}
}

// Handle implements chat.Handler.
func (rt *Router) Handle(ctx context.Context, ev chat.Event) chat.Response {
	var msg string
	var err error
	var answer bool // the answer to a command: shown on every surface
	switch ev.Kind {
	case chat.Refused:
		if rt.OnInbound != nil {
			rt.OnInbound(ev.Surface, ev.Kind, false)
		}
		rt.auditWebhookRefusal(ctx, ev)
		return chat.Response{} // the connector has answered the sender
	case chat.Ask, chat.Command:
		if ev.Kind == chat.Command || IsCommand(ev.Text) {
			msg, err = rt.commandOnce(ctx, ev)
			answer = true
			break
		}
		var r *requests.Request
		r, err = rt.Ask(ctx, ev)
		if err == nil {
			msg = fmt.Sprintf("%s → %s (%s)", r.ID, r.Agent, r.State)
		}
	case chat.Click:
		if ev.Click != nil && ev.Click.ActionID == approvals.ActionRetry {
			msg, err = rt.retryClick(ctx, ev)
			break
		}
		// Refusals are audited by approvals; the actor alone is told why.
		var a *approvals.Approval
		a, err = rt.appr.Click(ctx, ev.Click, ev.User, ev.Surface)
		if err == nil {
			msg = fmt.Sprintf("%s %s", a.ID, a.State)
		}
	case chat.Reply:
		msg, err = rt.reply(ctx, ev)
	case chat.Edit, chat.Delete:
		err = rt.askChanged(ctx, ev)
	default:
		err = fmt.Errorf("unsupported event %q", ev.Kind)
	}
	dup := errors.Is(err, requests.ErrDuplicate)
	if rt.OnInbound != nil {
		rt.OnInbound(ev.Surface, ev.Kind, dup)
	}
	if dup {
		return chat.Response{} // a platform retry: already handled
	}
	if ours(ctx, err) {
		rt.log.WarnContext(ctx, "event not handled: the platform is to deliver it again", "surface", ev.Surface,
			"kind", string(ev.Kind), "event_id", ev.ID, "error", err)
		return chat.Response{Retry: true}
	}
	if err != nil {
		rt.log.InfoContext(ctx, "refused", "surface", ev.Surface, "user", ev.User, "kind", string(ev.Kind), "error", err)
		rt.auditRefusal(ctx, ev, err)
		return chat.Response{Text: userMessage(err), Error: true}
	}
	return chat.Response{Text: msg, Answer: answer}
}

// Ask turns an ask into a request for the named agent ("@coder ..." or
// "coder: ...") or the room's first agent.
func (rt *Router) Ask(ctx context.Context, ev chat.Event) (*requests.Request, error) {
	room, ok := rt.Room(ev.Surface, ev.Channel)
	if !ok {
		return nil, fmt.Errorf("%s %s is not bound to a room", ev.Surface, ev.Channel)
	}
	if !rt.rooms.MayAsk(room.Name, ev.User) {
		return nil, fmt.Errorf("%w: %s is not a member of room %s", ErrForbidden, ev.User, room.Name)
	}
	agent, text := splitAgent(room, ev.Text)
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("the ask for %s is empty", agent)
	}
	a := requests.Ask{Agent: agent, Room: room.Name, Surface: ev.Surface, User: ev.User, Text: text, EventKey: eventKey(ev)}
	if ev.Message != "" {
		a.Origin = requests.Origin(ev.Surface, ev.Channel, ev.Message)
	}
	return rt.svc.Create(ctx, a)
}

// eventKey is the key that deduplicates ev's redeliveries (as
// requests.Ask.EventKey): its surface and platform ID; "" without an ID.
func eventKey(ev chat.Event) string {
	if ev.ID == "" {
		return ""
	}
	return ev.Surface + ":" + ev.ID
}

// splitAgent takes the agent's name off the front of text, if it names one of
// the room's agents.
func splitAgent(room config.Room, text string) (agent, rest string) {
	text = strings.TrimSpace(text)
	first, rest, _ := strings.Cut(text, " ")
	name := strings.TrimSuffix(strings.TrimPrefix(first, "@"), ":")
	if slices.Contains(room.Agents, name) {
		return name, strings.TrimSpace(rest)
	}
	return room.Agents[0], text
}

// Decide approves or denies approval id (a request's approval, R-07, or a
// permission its agent asked for, R-07.1): the compare-and-set of
// approvals.Service.Decide. Refusals are audited there.
func (rt *Router) Decide(ctx context.Context, id string, approve bool, user, surface string) (*approvals.Approval, error) {
	v := approvals.Deny
	if approve {
		v = approvals.Approve
	}
	return rt.appr.Decide(ctx, id, v, user, surface)
}

// Answer answers question id (R-08.q1, asked by an agent through ask_user)
// with text: the compare-and-set of approvals.Service.Answer (the first
// answer wins). Refusals are audited there.
func (rt *Router) Answer(ctx context.Context, id, text, user, surface string) (*approvals.Approval, error) {
	return rt.appr.Answer(ctx, id, text, user, surface)
}

// Cancel cancels a request: at once if it has not started, at its next safe
// point if it runs. Its requester, the room's approvers and owners may.
func (rt *Router) Cancel(ctx context.Context, id requests.ID, user, surface string) (*requests.Request, error) {
	var out *requests.Request
	err := rt.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := rt.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		if r.Requester != user && !rt.rooms.MayDecide(r.Room, user) {
			return fmt.Errorf("%w: only its requester, the room's approvers or an owner may cancel %s", ErrForbidden, r.ID)
		}
		reason := "cancelled by " + user
		switch {
		case r.State.Terminal():
			return conflict(fmt.Sprintf("%s has already ended (%s)", r.ID, r.State))
		case r.State == requests.Running:
			if r.CancelRequested {
				out = r
				return nil
			}
			out, err = rt.svc.UpdateTx(tx, id, user, "cancel_requested", reason, func(r *requests.Request) {
				r.CancelRequested, r.Reason = true, reason
			})
			return err
		default:
			out, err = rt.svc.ApplyTx(tx, id, requests.Change{Event: requests.Cancel, Actor: user, Surface: surface,
				Detail: reason, Mutate: func(r *requests.Request) { r.Reason = reason }})
			return err
		}
	})
	return out, err
}

// Retry makes a new request asking again what an ended request asked.
func (rt *Router) Retry(ctx context.Context, id requests.ID, user, surface string) (*requests.Request, error) {
	return rt.retry(ctx, id, user, surface, "")
}

// retry is Retry; eventKey, if set, names the platform event that asked
// for it (a redelivery of it makes no second request).
func (rt *Router) retry(ctx context.Context, id requests.ID, user, surface, eventKey string) (*requests.Request, error) {
	old, err := rt.svc.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !rt.rooms.MayAsk(old.Room, user) {
		return nil, fmt.Errorf("%w: %s is not a member of room %s", ErrForbidden, user, old.Room)
	}
	if !old.State.Terminal() { // as requests.Service.Retry says it, but a conflict
		return nil, conflict(fmt.Sprintf("requests: retry %s: it is still %s (retry makes a new request once it has ended)", id, old.State))
	}
	return rt.svc.RetryEvent(ctx, id, user, surface, eventKey)
}

// retryClick handles the Retry button of an expired card: the retry
// command on the request the button names, authorised as the command is.
func (rt *Router) retryClick(ctx context.Context, ev chat.Event) (string, error) {
	return rt.requestCommand(ctx, "retry", ev.Click.Value, ev)
}

// ours reports whether err is a failure of the bridge's, not a refusal of
// the event: the store could not take it (unavailable, full, closed, this
// instance no longer leads) or the handler's time ran out.
func ours(ctx context.Context, err error) bool {
	return err != nil && (store.Transient(err) || errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrFenced) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || ctx.Err() != nil)
}

// userMessage is the one place that turns an error into what a person reads.
func userMessage(err error) string {
	msg := err.Error()
	for _, p := range []string{"requests: create: ", "requests: ", "rooms: ", "approvals: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// reply hands a message in a request's thread to its agent, at the agent's
// next turn boundary — unless a question is open in that thread (asked by
// its agent, or by work delegated under it): then the message answers the
// question. Messages in threads that are no request's are ignored.
func (rt *Router) reply(ctx context.Context, ev chat.Event) (string, error) {
	if ev.Thread == nil {
		return "", nil
	}
	var rid string
	err := rt.svc.Store().View(ctx, func(tx store.Tx) error {
		var err error
		rid, err = threads.RequestOfThread(tx, *ev.Thread)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	id, err := requests.ParseID(rid)
	if err != nil {
		return "", err
	}
	q, err := rt.appr.AnswerInThread(ctx, id, ev.Text, ev.User, ev.Surface, eventKey(ev))
	switch {
	case errors.Is(err, requests.ErrDuplicate):
		return "", err
	case err != nil:
		return "", audited{err}
	case q != nil:
		return fmt.Sprintf("%s answered; %s gets your answer", q.ID, approvals.QuestionAsker(q)), nil
	}
	r, err := rt.svc.Get(ctx, id)
	if err != nil {
		return "", err
	}
	if !rt.rooms.MayAsk(r.Room, ev.User) {
		return "", fmt.Errorf("%w: %s is not a member of room %s", ErrForbidden, ev.User, r.Room)
	}
	if r.State.Terminal() {
		return "", fmt.Errorf("%s has ended (%s): ask again, or retry %s", r.ID, r.State, r.ID.Short())
	}
	if _, err := agents.ReplyEvent(ctx, rt.svc, id, ev.User, ev.Surface, ev.Text, eventKey(ev)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s will read your reply at its next turn", r.ID), nil
}

// audited is a refusal already audited where it was decided (an answer
// refused by approvals).
type audited struct{ error }

func (a audited) Unwrap() error { return a.error }

// auditRefusal records a refused ask or reply (decisions, answers and
// commands that reach approvals or requests are audited there). Nothing else
// changes.
func (rt *Router) auditRefusal(ctx context.Context, ev chat.Event, cause error) {
	if ev.Kind != chat.Ask && ev.Kind != chat.Reply || errors.As(cause, new(audited)) {
		return
	}
	err := rt.svc.Store().Update(ctx, func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{Time: rt.svc.Clock().Now(), Actor: ev.User, Surface: ev.Surface,
			Action: string(ev.Kind) + "_refused", Detail: userMessage(cause)})
	})
	if err != nil {
		rt.log.ErrorContext(ctx, "auditing a refusal", "error", err)
	}
}
