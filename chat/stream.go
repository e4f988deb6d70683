package chat

import (
	"context"
	"time"
)

// Streamer is a Connector that shows an answer while it is written: a live
// message in a request's thread, updated at the connector's pace, then
// closed with its final text. The live text is in memory only (threads.Live
// coalesces the deltas); what must survive a restart (the live message's
// reference, the final answer) goes through the store and the outbox.
// Threads.Live and the outbox find it on the unwrapped connector (see
// threads.Fenced), like every optional interface of this package.
type Streamer interface {
	Connector
	// OpenStream starts a live message in thread t.
	OpenStream(ctx context.Context, t ThreadRef, m Message) (MessageRef, error)
	// AppendStream shows u on the live message ref.
	AppendStream(ctx context.Context, ref MessageRef, u StreamUpdate) error
	// CloseStream ends the live message ref with m.Text as its whole
	// content (the final answer, or what was written and a note that it
	// was interrupted). It is safe to repeat: closing a message that is
	// closed already puts m.Text in it again.
	CloseStream(ctx context.Context, ref MessageRef, m Message) error
	// StreamPace is the least time between two updates of one live
	// message (Slack: 500 ms, Feishu CardKit: 200 ms).
	StreamPace() time.Duration
}

// LiveBound is a Streamer whose live messages hold a bounded text (a
// platform's message or card size): FitsLive reports whether text fits
// one. A final answer that does not is posted by the outbox as a message
// of its own, which the connector splits or attaches as a file, and the
// live message is closed with a note that says so (threads.Live).
type LiveBound interface {
	Streamer
	FitsLive(text string) bool
}

// StreamUpdate is what changed on a live message since the last update.
type StreamUpdate struct {
	// Delta is the text written since the last update; Text is the whole
	// text of the live message so far (Delta is its tail). Surfaces that
	// append send Delta, surfaces that rewrite send Text.
	Delta string
	Text  string
	// Steps are the tool steps that started or ended since the last update.
	Steps []ToolStep
	// Thinking is what the agent weighs now ("": nothing said).
	Thinking string
}

// Tool step states.
const (
	StepStarted = "in_progress"
	StepDone    = "complete"
	StepFailed  = "error"
)

// ToolStep is one step of a live message's tool timeline.
type ToolStep struct {
	// ID is stable across the updates of one step.
	ID     string
	Name   string
	Status string // StepStarted, StepDone, StepFailed
	// Took is how long the step ran (once it ended).
	Took time.Duration
}
