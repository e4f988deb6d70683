package threads

import (
	"fmt"
	"strings"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
)

// Title is a thread's title: "R20261129-07 · coder · asked by slack:U1".
func Title(r *requests.Request) string {
	t := fmt.Sprintf("%s · %s · asked by %s", r.ID, r.Agent, r.Requester)
	if !r.DelegatedBy.IsZero() {
		t += " for " + r.DelegatedBy.String()
	}
	return t
}

// StatusLine is the live status of a request as its parent message shows it.
func StatusLine(r *requests.Request) string {
	switch r.State {
	case requests.Pending:
		return "pending approval"
	case requests.Approved:
		return "approved · queued"
	case requests.Running:
		parts := []string{"running"}
		if r.Progress > 0 {
			parts = append(parts, fmt.Sprintf("%d%%", r.Progress))
		}
		if r.Activity != "" {
			parts = append(parts, r.Activity)
		}
		if r.CancelRequested {
			parts = append(parts, "cancelling")
		}
		return strings.Join(parts, " · ")
	case requests.Done:
		return "done"
	case requests.Failed, requests.Cancelled, requests.Expired:
		if r.Reason != "" {
			return r.State.String() + ": " + r.Reason
		}
		return r.State.String()
	}
	return r.State.String()
}

// Parent renders the thread's parent message: title, the ask, the status.
func Parent(r *requests.Request) chat.Message {
	return chat.Message{
		Request: r.ID.String(),
		Kind:    "parent",
		Text:    Title(r) + " — " + StatusLine(r),
		Card: &chat.Card{
			Title:  Title(r),
			Text:   r.Ask,
			Status: StatusLine(r),
		},
	}
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
