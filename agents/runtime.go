// Package agents runs agent turns: the Runtime interface and its exec runtime,
// and the scheduler that works through each agent's requests one at a time, in
// ID order, with different agents in parallel.
package agents

import "context"

// Turn is one turn of a request given to a runtime.
type Turn struct {
	RequestID string
	Agent     string
	// Session is the runtime's conversation to continue ("" for a new one).
	Session string
	// Resumed is set when the turn continues a request interrupted by a restart.
	Resumed bool
	Input   []Input
	// Cancel is closed when the request is cancelled: the runtime stops the
	// agent at its next safe point (after the tool that runs ends).
	Cancel <-chan struct{}
}

// Sink receives what the agent reports during a turn. Calls come from the
// runtime's goroutine, in order.
type Sink interface {
	// Session records the runtime's session reference.
	Session(ctx context.Context, id string) error
	// Tool reports a tool starting or ending (phase "start" or "end").
	Tool(ctx context.Context, phase, name string) error
	// Progress reports progress (0-100) and what the agent is doing.
	Progress(ctx context.Context, percent int, text string) error
	// Message posts text to the request's thread.
	Message(ctx context.Context, text string) error
}

// Outcome is how a turn ended.
type Outcome struct {
	// Final is the answer, when the agent gave one.
	Final string
	// Yielded: the agent ended its turn waiting (on a delegation or task).
	Yielded bool
	// Stopped: the agent stopped after a cancel; Final holds what was done.
	Stopped bool
}

// Runtime runs one turn of an agent. A returned error means the turn failed;
// its text is the reason shown in the thread.
type Runtime interface {
	Run(ctx context.Context, t Turn, sink Sink) (Outcome, error)
}
