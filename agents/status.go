package agents

import (
	"context"

	"github.com/roombridge/roombridge/requests"
)

// Status shows what the runtime itself reports of the turn (a model API
// retry: "model API: overloaded (529), retry 2/10") as the activity of the
// thread's status line, leaving the progress as it is. Runtimes find it on
// their Sink through an interface of their own (agents/process).
func (k *sink) Status(ctx context.Context, text string) error {
	return k.update(ctx, "", "", func(r *requests.Request) { r.Activity = text })
}
