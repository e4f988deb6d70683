package requests

import "time"

// Request is one ask of one agent.
type Request struct {
	ID        ID     `json:"id"`
	Owner     string `json:"owner"`
	Agent     string `json:"agent"`
	Room      string `json:"room,omitempty"`
	Surface   string `json:"surface"`
	Requester string `json:"requester"`
	Ask       string `json:"ask"`
	State     State  `json:"state"`
	// Version counts the record's writes (compare-and-set by callers).
	Version int64 `json:"version"`
	// RetryOf is the request this one retries.
	RetryOf ID `json:"retry_of,omitzero"`
	// References are requests mentioned in the ask: their results go into
	// this request's context.
	References []ID `json:"references,omitempty"`
	// DelegatedBy is the request whose agent asked for this one.
	DelegatedBy ID `json:"delegated_by,omitzero"`
	// Session is the agent runtime's own conversation reference.
	Session string `json:"session,omitempty"`
	// CancelRequested is set by a cancel of a running request; the agent stops
	// at its next safe point.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Progress (0-100) and Activity are the agent's last progress report,
	// shown in the thread's status line.
	Progress int    `json:"progress,omitempty"`
	Activity string `json:"activity,omitempty"`
	// Reason says why a request was cancelled, failed or expired.
	Reason string `json:"reason,omitempty"`
	// Result is the final answer (or the partial output of an incomplete run).
	Result    string    `json:"result,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Usage sums what the request's turns cost (tokens, dollars).
	Usage Usage `json:"usage,omitzero"`
}
