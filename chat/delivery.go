package chat

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The delivery contract: what the outbox (threads.Deliverer) and the
// connectors tell each other besides the Connector methods.

// ErrPermanent marks a delivery error that no retry can fix (the outbox
// drops the effect with an audit record). Connectors wrap it around a
// request the platform refused.
var ErrPermanent = errors.New("permanent delivery error")

// RetryAfterError is returned by a Connector when the platform asked it to
// wait (HTTP 429 Retry-After, Feishu's x-ogw-ratelimit-reset): the outbox
// retries the effect after After, not after its usual back-off.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %v", e.After, e.Err)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// Finder is a Connector whose platform takes no idempotency key (Slack):
// each of its posts carries the message's IdempotencyKey (Slack: in the
// message metadata), and FindPosted looks for it. Before the outbox posts an
// effect in doubt (one that may have been posted without being recorded), it
// asks; a message found is recorded exactly as if it had just been posted,
// and nothing is posted.
type Finder interface {
	Connector
	// FindPosted returns the message posted with l.Key where l says, or
	// false. A thread parent found also names its thread: the thread's ID is
	// the parent's message ID.
	FindPosted(ctx context.Context, l Lookup) (MessageRef, bool, error)
}

// Lookup is a post to look for: its key, when its effect was enqueued, and
// where it would be (Channel, Thread or User).
type Lookup struct {
	// Key is the message's IdempotencyKey.
	Key string
	// Since is when the effect was enqueued (wall clock): the post is not
	// older (give or take the clocks' skew). Zero: unknown.
	Since time.Time
	// Channel: a top-level message of this channel (a thread's parent).
	Channel string
	// Thread: a reply in this thread.
	Thread *ThreadRef
	// User: a direct message to this user (the surface's user ID).
	User string
}
