package rooms

import (
	"context"
	"fmt"
	"strings"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// askChanged handles the edit or the deletion of the message that asked a
// request (chat.Edit, chat.Delete). What it does is audited and said in the
// request's thread, in one transaction with the event's dedupe key, so that
// a redelivery does nothing. A message that asked no request (a reply, a
// message older than the requests keep their asks' messages) is ignored.
func (rt *Router) askChanged(ctx context.Context, ev chat.Event) error {
	if ev.Message == "" || ev.Channel == "" {
		return nil
	}
	origin := requests.Origin(ev.Surface, ev.Channel, ev.Message)
	return rt.svc.Store().Update(ctx, func(tx store.Tx) error {
		id, ok, err := rt.svc.OriginTx(tx, origin)
		if err != nil || !ok {
			return err
		}
		if key := eventKey(ev); key != "" {
			fresh, err := store.Dedupe(tx, "ask:"+key, rt.svc.Clock().Now(), commandDedupeTTL)
			if err != nil {
				return fmt.Errorf("rooms: %s of %s: %w", ev.Kind, id, err)
			}
			if !fresh {
				return fmt.Errorf("rooms: %s of %s: %w %s", ev.Kind, id, requests.ErrDuplicate, key)
			}
		}
		r, err := rt.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		if ev.Kind == chat.Delete {
			return rt.askDeletedTx(tx, r, ev)
		}
		return rt.askEditedTx(ctx, tx, r, ev)
	})
}

// askEditedTx applies the edit ev of r's ask: before r starts, the new text
// is r's ask (requests.EditAskTx); after, or when the new text cannot be an
// ask of r, the thread says the edit was not applied. Only the asker edits
// their message; an edit that leaves the ask as it was (Slack also reports
// a message changed by an unfurl) says nothing.
func (rt *Router) askEditedTx(ctx context.Context, tx store.Tx, r *requests.Request, ev chat.Event) error {
	if ev.User != r.Requester {
		rt.log.InfoContext(ctx, "edit of an ask by someone else than its asker ignored", "request_id", r.ID.String(), "user", ev.User)
		return nil
	}
	agent, text := r.Agent, strings.TrimSpace(ev.Text)
	if room, ok := rt.rooms.Named(r.Room); ok && text != "" {
		agent, text = splitAgent(room, text)
	}
	if text == r.Ask && agent == r.Agent {
		return nil
	}
	var why string
	switch {
	case text == "":
		why = fmt.Sprintf("the edited ask is empty (cancel %s to withdraw it)", r.ID.Short())
	case agent != r.Agent:
		why = fmt.Sprintf("it names %s, and an edit does not move a request to another agent: ask again", agent)
	default:
		after, err := rt.svc.EditAskTx(tx, r.ID, ev.User, ev.Surface, text)
		switch {
		case err == nil:
			return rt.noticeTx(tx, after, fmt.Sprintf("%s's ask was updated by its asker; it now asks: %s", r.ID, clip.Text(text, 500, clip.Runes)))
		case ours(ctx, err):
			return err
		case r.State == requests.Running || r.State.Terminal():
			why = fmt.Sprintf("%s had already started (%s); reply in this thread to tell %s", r.ID, r.State, r.Agent)
			if r.State.Terminal() {
				why = fmt.Sprintf("%s has ended (%s)", r.ID, r.State)
			}
		default:
			why = userMessage(err)
		}
	}
	if err := audit.Append(tx, audit.Record{Time: rt.svc.Clock().Now(), RequestID: r.ID.String(), Actor: ev.User,
		Surface: ev.Surface, Action: "ask_edit_not_applied", Detail: why}); err != nil {
		return err
	}
	return rt.noticeTx(tx, r, "The edit of the ask was not applied: "+why+".")
}

// askDeletedTx follows the deletion of r's ask: a request that has not
// started is cancelled (its thread says why); a running one goes on, and
// its thread says so; an ended one changes nothing.
func (rt *Router) askDeletedTx(tx store.Tx, r *requests.Request, ev chat.Event) error {
	actor := ev.User
	if actor == "" { // the platform does not say who deleted it
		actor = "system:" + ev.Surface
	}
	switch r.State {
	case requests.Pending, requests.Approved:
		const reason = "its ask was deleted"
		_, err := rt.svc.ApplyTx(tx, r.ID, requests.Change{Event: requests.Cancel, Actor: actor, Surface: ev.Surface,
			Detail: reason, Mutate: func(r *requests.Request) { r.Reason = reason }})
		return err
	case requests.Running:
		if err := audit.Append(tx, audit.Record{Time: rt.svc.Clock().Now(), RequestID: r.ID.String(), Actor: actor,
			Surface: ev.Surface, Action: "ask_deleted", Detail: "running: it goes on"}); err != nil {
			return err
		}
		return rt.noticeTx(tx, r, fmt.Sprintf("The message that asked %s was deleted; %s goes on (cancel %s to stop it).",
			r.ID, r.ID, r.ID.Short()))
	}
	return nil
}

// noticeTx says text in r's thread.
func (rt *Router) noticeTx(tx store.Tx, r *requests.Request, text string) error {
	return threads.New(rt.rooms).Reply(tx, r, chat.Message{Kind: "notice", Text: text})
}
