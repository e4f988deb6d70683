package feishu

import (
	"context"
	"time"

	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/handled"
)

// onRecalled handles im.message.recalled_v1: a recalled message is a
// chat.Delete naming it (the core cancels an ask that has not started).
// Feishu does not say who recalled it (its recall_type tells the sender
// from an administrator, not who), so the event names nobody. Like a
// message, it answers nil once the core has handled it, else an error, so
// that Feishu pushes it again. Feishu's SDK (v3.12.0) has no event for an
// edited message: an edit is not seen (docs/design.md).
func (c *Connector) onRecalled(ctx context.Context, ev *larkim.P2MessageRecalledV1) error {
	arrived := time.Now()
	h := c.current()
	if h == nil {
		return errNoHandler
	}
	if ev == nil || ev.Event == nil || str(ev.Event.MessageId) == "" || str(ev.Event.ChatId) == "" {
		return nil
	}
	in := chat.Event{Kind: chat.Delete, Surface: chat.Feishu, Channel: *ev.Event.ChatId, Message: *ev.Event.MessageId}
	if ev.EventV2Base != nil && ev.EventV2Base.Header != nil {
		in.ID = ev.EventV2Base.Header.EventID
	}
	told := func(a handled.Answer) {
		if a.Tell {
			c.answered.Told(in.ID, true) // nobody to tell
		}
	}
	return c.deliver(ctx, h, in, arrived, "recall", told)
}
