package threads

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Extra is what a thread's parent shows besides the request record, read
// from the store in the transaction that renders it.
type Extra struct {
	// Asker is the agent of the request that delegated this one (its
	// DelegatedBy); "" when there is none or it is unknown.
	Asker string
	// Waiting says what the request waits on, as delegation keeps it
	// (SetWaitingTx): "waiting on R-08 (reviewer)"; "" for nothing.
	Waiting string
	// Link is the request's web page, shown as an "Open" field ("": none).
	Link string
}

// Title is a thread's title: "R20261129-07 · coder · asked by slack:U1".
// A delegated request names the agent and request that asked, and the
// person the work is for: "R20261129-08 · reviewer · asked by coder
// (R20261129-07) for slack:U1" (asker is that agent; "" if unknown).
func Title(r *requests.Request, asker string) string {
	t := fmt.Sprintf("%s · %s · asked by ", r.ID, r.Agent)
	switch {
	case r.DelegatedBy.IsZero():
		return t + r.Requester
	case asker != "":
		return t + fmt.Sprintf("%s (%s) for %s", asker, r.DelegatedBy, r.Requester)
	default:
		return t + fmt.Sprintf("%s for %s", r.DelegatedBy, r.Requester)
	}
}

// StatusLine is the live status of a request as its parent message shows
// it. waiting (Extra.Waiting) says what a running request waits on; it
// replaces the scheduler's generic "waiting…" activity, which says less.
func StatusLine(r *requests.Request, waiting string) string {
	switch r.State {
	case requests.Pending:
		return "pending approval"
	case requests.Approved:
		if r.Activity != "" {
			// Why it waits, when something says (an away runner).
			return "approved · queued · " + r.Activity
		}
		return "approved · queued"
	case requests.Running:
		parts := []string{"running"}
		if r.Progress > 0 {
			parts = append(parts, fmt.Sprintf("%d%%", r.Progress))
		}
		if r.Activity != "" && (waiting == "" || !strings.HasPrefix(r.Activity, "waiting")) {
			parts = append(parts, r.Activity)
		}
		if waiting != "" {
			parts = append(parts, waiting)
		}
		if r.CancelRequested {
			parts = append(parts, "cancelling")
		}
		return strings.Join(parts, " · ")
	case requests.Done:
		if r.Usage.IsZero() {
			return "done"
		}
		var took time.Duration
		if !r.StartedAt.IsZero() && r.EndedAt.After(r.StartedAt) {
			took = r.EndedAt.Sub(r.StartedAt)
		}
		return "done · " + r.Usage.Line(took)
	case requests.Failed, requests.Cancelled, requests.Expired:
		if r.Reason != "" {
			return r.State.String() + ": " + r.Reason
		}
		return r.State.String()
	}
	return r.State.String()
}

// Parent renders the thread's parent message without extras: title, the
// ask, the status.
func Parent(r *requests.Request) chat.Message { return ParentWith(r, Extra{}) }

// ParentWith renders the thread's parent message: title, the ask, the
// status, with x.
func ParentWith(r *requests.Request, x Extra) chat.Message {
	title, status := Title(r, x.Asker), StatusLine(r, x.Waiting)
	return chat.Message{
		Request: r.ID.String(),
		Kind:    "parent",
		Text:    title + " — " + status,
		Card: &chat.Card{
			Title:  title,
			Text:   r.Ask,
			Status: status,
			Fields: linkField(x.Link),
		},
	}
}

func linkField(link string) []chat.Field {
	if link == "" {
		return nil
	}
	return []chat.Field{{Label: "Open", Value: link}}
}

// Outcome renders the reply that ends a thread: the final answer, or why
// there is none.
func Outcome(r *requests.Request) chat.Message {
	m := chat.Message{Request: r.ID.String(), Kind: "final"}
	switch r.State {
	case requests.Done:
		m.Text = r.Result
		if m.Text == "" {
			m.Text = "(done, no answer text)"
		}
	case requests.Failed:
		m.Text = "failed: " + r.Reason
	case requests.Cancelled:
		m.Text = "cancelled"
		if r.Reason != "" {
			m.Text += ": " + r.Reason
		}
		if r.Result != "" {
			m.Text += "\nincomplete — done so far: " + r.Result
		}
	case requests.Expired:
		m.Text = "expired"
		if r.Reason != "" {
			m.Text += ": " + r.Reason
		}
	}
	return m
}

// bucketWaiting keeps what a request waits on, for its status line:
// <request ID> → text (absent: nothing).
const bucketWaiting = "thread_waiting"

// SetRequests lets Threads read the request that asked for a delegated one,
// to name its agent in the delegated request's title. Call it before the
// request service is used.
func (t *Threads) SetRequests(svc *requests.Service) { t.requests = svc }

func waitingTx(tx store.Tx, id string) (string, error) {
	b, err := tx.Get(bucketWaiting, id)
	if isNotFound(err) {
		return "", nil
	}
	return string(b), err
}

// extraTx reads r's Extra (waiting is already read).
func (t *Threads) extraTx(tx store.Tx, r *requests.Request, waiting string) (Extra, error) {
	x := Extra{Waiting: waiting}
	if t.Links != nil {
		x.Link = t.Links(r.ID.String())
	}
	if r.DelegatedBy.IsZero() || t.requests == nil {
		return x, nil
	}
	asker, err := t.requests.GetTx(tx, r.DelegatedBy)
	switch {
	case errors.Is(err, requests.ErrUnknown):
	case err != nil:
		return x, err
	default:
		x.Asker = asker.Agent
	}
	return x, nil
}

// SetWaitingTx records what request r waits on ("" for nothing), in the
// caller's transaction, and queues the update of r's status line if that
// changes it (coalesced with r's other status edits). The text survives
// restarts: every later rendering of r's parent reads it.
func (t *Threads) SetWaitingTx(tx store.Tx, r *requests.Request, waiting string) error {
	id := r.ID.String()
	old, err := waitingTx(tx, id)
	if err != nil || old == waiting {
		return err
	}
	if waiting == "" {
		err = tx.Delete(bucketWaiting, id)
	} else {
		err = tx.Put(bucketWaiting, id, []byte(waiting))
	}
	if err != nil {
		return fmt.Errorf("threads: set waiting %s: %w", id, err)
	}
	surface, _, ok := t.Place(r)
	if !ok || StatusLine(r, old) == StatusLine(r, waiting) {
		return nil
	}
	x, err := t.extraTx(tx, r, waiting)
	if err != nil {
		return err
	}
	return Enqueue(tx, Effect{Op: OpUpdate, Request: id, Surface: surface, Ref: ParentRef(id), Message: ParentWith(r, x)})
}
