package approvals

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// Card renders an approval as the card every surface shows: what is asked,
// by whom, until when, its state, and the Approve and Deny buttons while it
// is pending. The block ID carries the version the buttons decide.
func Card(a *Approval) chat.Message {
	title := "Approval needed · " + a.ID + " · " + a.Agent
	fields := []chat.Field{{Label: "Asked by", Value: a.Requester}}
	if a.Kind == KindAction {
		title = "Permission asked · " + a.ID + " · " + a.Agent
		fields = []chat.Field{{Label: "Asked by", Value: a.Asker}, {Label: "Request", Value: a.RequestID.String() + ", asked by " + a.Requester}}
	}
	if !a.Root.IsZero() {
		fields = append(fields, chat.Field{Label: "On behalf of", Value: a.Root.String()})
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
			{ActionID: string(Deny), Label: "Deny", Value: a.ID, Style: "danger"},
		}
	}
	return chat.Message{
		Request: a.RequestID.String(),
		Kind:    "approval",
		Text:    title + " — " + card.Status,
		Card:    card,
	}
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
	switch a.State {
	case Pending:
		return "waiting for a decision · expires " + stamp(a.ExpiresAt, a.Created)
	case Approved, Denied:
		return fmt.Sprintf("%s by %s at %s", a.State, a.DecidedBy, stamp(a.DecidedAt, a.Created))
	case Expired:
		if a.Kind == KindAction {
			return "expired after " + Duration(a.TTL) + " — the agent was told: not approved"
		}
		return "expired after " + Duration(a.TTL) + " — retry " + retryRef(a) + " to ask again"
	case Withdrawn:
		return "withdrawn at " + stamp(a.DecidedAt, a.Created) + ": " + a.Reason
	}
	return string(a.State)
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
		return fmt.Sprintf("inbox of %s: nothing waits for a decision", in.Room)
	}
	lines := []string{fmt.Sprintf("inbox of %s: %d waiting, oldest first", in.Room, in.Count)}
	for _, it := range in.Items {
		a := it.Approval
		what := a.Requester + " asks " + a.Agent
		if a.Kind == KindAction {
			what = a.Asker + " asks permission"
		}
		lines = append(lines, fmt.Sprintf("%d of %d · %s · %s (%s): %s · expires %s · type: approve %s | deny %s",
			it.Position, it.Of, a.ID, what, it.Asking.State, oneLine(a.Action, 80), stamp(a.ExpiresAt, a.Created), a.ID, a.ID))
	}
	return strings.Join(lines, "\n")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
