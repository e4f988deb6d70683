package requests

import (
	"errors"
	"fmt"
)

// State is a request's lifecycle state. Values are persisted: never renumber.
type State uint8

const (
	// Pending: waiting for an approval (asked by someone other than an owner).
	Pending State = 1
	// Approved: queued for its agent.
	Approved State = 2
	// Running: its agent works on it (also while it waits on a delegation).
	Running State = 3
	// Done: the agent gave its final answer.
	Done State = 4
	// Failed: the agent failed; the reason is recorded.
	Failed State = 5
	// Cancelled: cancelled by a person, or denied (reason "denied by …").
	Cancelled State = 6
	// Expired: its approval was not answered in time. Never a denial.
	Expired State = 7
)

var stateNames = [...]string{"", "pending", "approved", "running", "done", "failed", "cancelled", "expired"}

// States lists every state in lifecycle order.
var States = []State{Pending, Approved, Running, Done, Failed, Cancelled, Expired}

func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// ParseState parses a state name.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name && i > 0 {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("requests: unknown state %q (want one of pending, approved, running, done, failed, cancelled, expired)", name)
}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool { return s >= Done }

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	*s = v
	return err
}

// Event is something that moves a request. Each event has one target state.
type Event uint8

const (
	// Approve: an approver said yes.
	Approve Event = iota + 1
	// Deny: an approver said no (recorded as cancelled).
	Deny
	// Cancel: a person or the system cancelled it.
	Cancel
	// Expire: its approval timed out.
	Expire
	// Start: its agent began working on it.
	Start
	// Resume: after a restart, the agent continues it with its session.
	Resume
	// Finish: the agent gave its final answer.
	Finish
	// Fail: the agent failed.
	Fail
)

// Events lists every event.
var Events = []Event{Approve, Deny, Cancel, Expire, Start, Resume, Finish, Fail}

var eventNames = [...]string{"", "approve", "deny", "cancel", "expire", "start", "resume", "finish", "fail"}

var eventTarget = [...]State{0, Approved, Cancelled, Cancelled, Expired, Running, Running, Done, Failed}

func (e Event) String() string {
	if int(e) < len(eventNames) && e != 0 {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", e)
}

// Target is the state e moves a request to.
func (e Event) Target() State {
	if int(e) < len(eventTarget) {
		return eventTarget[e]
	}
	return 0
}

// legal lists, per state, the events it accepts.
var legal = map[State][]Event{
	Pending:  {Approve, Deny, Cancel, Expire},
	Approved: {Start, Cancel},
	Running:  {Resume, Finish, Fail, Cancel},
}

// ErrIllegalTransition: the event is not allowed in the current state.
var ErrIllegalTransition = errors.New("illegal transition")

// Next is the pure transition function: the state that cur moves to on e, or
// an error naming both states when e is not allowed in cur.
func Next(cur State, e Event) (State, error) {
	for _, ok := range legal[cur] {
		if ok == e {
			return e.Target(), nil
		}
	}
	return cur, fmt.Errorf("requests: %w: %s → %s (%s)", ErrIllegalTransition, cur, e.Target(), e)
}
