package approvals

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
)

// Card renders an approval as the card every surface shows: what is asked,
// by whom, until when, its state, and the Approve and Deny buttons while it
// is pending. The block ID carries the version the buttons decide. A
// question renders as QuestionCard.
func Card(a *Approval) chat.Message {
	if a.Kind == KindQuestion {
		return QuestionCard(a)
	}
	title := "Approval needed · " + a.ID + " · " + a.Agent
	fields := []chat.Field{{Label: "Asked by", Value: a.Requester}}
	if a.Kind == KindAction {
		title = "Permission asked · " + a.ID + " · " + a.Agent
		fields = []chat.Field{{Label: "Asked by", Value: a.Asker}, {Label: "Request", Value: a.RequestID.String() + ", asked by " + a.Requester}}
	}
	if !a.Root.IsZero() {
		fields = append(fields, chat.Field{Label: "On behalf of", Value: a.Root.String()})
	}
	if a.Link != "" {
		fields = append(fields, chat.Field{Label: "Open", Value: a.Link})
	}
	card := &chat.Card{
		Title:   title,
		Text:    a.Action,
		Fields:  fields,
		Status:  Status(a),
		BlockID: BlockID(a),
	}
	if a.State == Pending {
		card.Buttons = []chat.Button{
			{ActionID: string(Approve), Label: "Approve", Value: a.ID, Style: "primary"},
			{ActionID: string(Deny), Label: "Deny", Value: a.ID, Style: "danger",
				Confirm: "Deny " + a.ID + "? The agent is told it was not approved."},
		}
	}
	return chat.Message{
		Request: a.RequestID.String(),
		Kind:    "approval",
		Text:    title + " — " + card.Status,
		Card:    card,
	}
}

// ActionRetry is the action ID of the Retry button on an expired request's
// card: its value is the request to ask again (package rooms handles the
// click as the retry command).
const ActionRetry = "retry"

// RetryOffer is what the thread of a request whose approval expired shows
// under its card: that it expired, and a Retry button for the requester (a
// new request that references this one, as the retry command makes).
func RetryOffer(a *Approval) chat.Message {
	text := a.Requester + ": nobody decided on " + a.RequestID.String() + " within " + Duration(a.TTL) + ". Retry asks again."
	return chat.Message{Request: a.RequestID.String(), Kind: KindRetryOffer, Text: text, Card: &chat.Card{
		Title: "Approval expired · " + a.ID, Text: text, BlockID: "retry:" + a.RequestID.String(),
		Buttons: []chat.Button{{ActionID: ActionRetry, Label: "Retry", Value: a.RequestID.String(), Style: "primary"}},
	}}
}

// KindRetryOffer is the message kind of RetryOffer.
const KindRetryOffer = "approval_retry"

// QuestionCard renders a question as every thread that shows it does,
// labelled with the asking request's agent and ID: "reviewer (R-08) asks:
// which region?", on behalf of the root request when delegated, with how to
// answer it while it is open, and the answer (or expiry) once settled. It
// has no buttons: a reply in the thread answers it.
func QuestionCard(a *Approval) chat.Message {
	who := QuestionAsker(a)
	var fields []chat.Field
	if !a.Root.IsZero() {
		fields = append(fields, chat.Field{Label: "On behalf of", Value: a.Root.String()})
	}
	status := Status(a)
	return chat.Message{
		Request: a.RequestID.String(),
		Kind:    "question",
		Text:    who + " asks: " + clip.Line(a.Action, 300, clip.Bytes) + " — " + status,
		Card: &chat.Card{
			Title:  "Question · " + a.ID + " · " + a.Agent,
			Text:   who + " asks: " + a.Action,
			Fields: fields,
			Status: status,
		},
	}
}

// QuestionAsker labels the request that asks question a by its agent's name
// and its ID, short if asked on the request's day: "reviewer (R-08)".
func QuestionAsker(a *Approval) string {
	id := a.RequestID.String()
	if sameDay(a.Created, a.RequestID.Day()) {
		id = a.RequestID.Short()
	}
	return a.Agent + " (" + id + ")"
}

// shortRef is the short form of full (a's request's ID, or a's own ID) while
// it still means it — until a expires on the day its request was asked —
// else full.
func shortRef(a *Approval, full string) string {
	if sameDay(a.ExpiresAt, a.RequestID.Day()) {
		return a.RequestID.Short() + strings.TrimPrefix(full, a.RequestID.String())
	}
	return full
}

// BlockID is "approval:<id>:<version>": what a click on the card decides.
func BlockID(a *Approval) string { return "approval:" + a.ID + ":" + strconv.FormatInt(a.Version, 10) }

// parseBlockID splits a block ID made by BlockID.
func parseBlockID(b string) (id string, version int64, ok bool) {
	rest, ok := strings.CutPrefix(b, "approval:")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || v < 1 {
		return "", 0, false
	}
	return rest[:i], v, true
}

// Status is the state line of an approval's card.
func Status(a *Approval) string {
	q := a.Kind == KindQuestion
	switch a.State {
	case Pending:
		if q {
			return "waiting for an answer: reply in this thread (or type: answer " + shortRef(a, a.ID) + " <text>) · " + expires(a)
		}
		return "waiting for a decision · " + expires(a)
	case Answered:
		return fmt.Sprintf("answered by %s at %s: %s", a.DecidedBy, stamp(a.DecidedAt, a.Created), clip.Line(a.Answer, 300, clip.Bytes))
	case Approved, Denied:
		return fmt.Sprintf("%s by %s at %s", a.State, a.DecidedBy, stamp(a.DecidedAt, a.Created))
	case Expired:
		if q {
			return "expired after " + Duration(a.TTL) + " unanswered — the agent was told: no answer"
		}
		if a.Kind == KindAction {
			return "expired after " + Duration(a.TTL) + " — the agent was told: not approved"
		}
		return "expired after " + Duration(a.TTL) + " — retry " + retryRef(a) + " to ask again"
	case Withdrawn:
		return "withdrawn at " + stamp(a.DecidedAt, a.Created) + ": " + a.Reason
	}
	return string(a.State)
}

// expires tells when pending a expires: "expires in 23 h (10:00 UTC)".
func expires(a *Approval) string {
	return "expires in " + a.left() + " (" + stamp(a.ExpiresAt, a.Created) + ")"
}

// retryRef names the request to retry: its short form while that still
// means it (the day it was asked), else its full ID.
func retryRef(a *Approval) string {
	if sameDay(a.ExpiresAt, a.RequestID.Day()) {
		return a.RequestID.Short()
	}
	return a.RequestID.String()
}

func sameDay(a, b time.Time) bool {
	ya, ma, da := a.UTC().Date()
	yb, mb, db := b.UTC().Date()
	return ya == yb && ma == mb && da == db
}

// stamp formats t in UTC: the time of day when it is on the same day as ref,
// else with the date.
func stamp(t, ref time.Time) string {
	if sameDay(t, ref) {
		return t.UTC().Format("15:04 UTC")
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// Duration formats a TTL for people: "24 h", "90 min", "45s".
func Duration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}

// Text renders the inbox as lines for a chat reply or the console.
func (in *Inbox) Text() string {
	if in.Count == 0 {
		return fmt.Sprintf("inbox of %s: nothing waits for a decision or an answer", in.Room)
	}
	lines := []string{fmt.Sprintf("inbox of %s: %d waiting, oldest first", in.Room, in.Count)}
	for _, it := range in.Items {
		a := it.Approval
		what := a.Requester + " asks " + a.Agent
		switch a.Kind {
		case KindAction:
			what = a.Asker + " asks permission"
		case KindQuestion:
			what = QuestionAsker(a) + " asks"
		}
		if !a.Root.IsZero() {
			what += " for " + a.Root.String()
		}
		how := fmt.Sprintf("type: approve %s | deny %s", a.ID, a.ID)
		if a.Kind == KindQuestion {
			how = fmt.Sprintf("reply in its thread, or type: answer %s <text>", a.ID)
		}
		lines = append(lines, fmt.Sprintf("%d of %d · %s · %s (%s): %s · expires %s · %s",
			it.Position, it.Of, a.ID, what, it.Asking.State, clip.Line(a.Action, 80, clip.Bytes), stamp(a.ExpiresAt, a.Created), how))
	}
	return strings.Join(lines, "\n")
}
