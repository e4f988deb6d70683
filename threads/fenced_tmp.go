package threads

import (
	"context"
	"fmt"

	"github.com/roombridge/roombridge/chat"
)

// TEMPORARY: replaced by the delivery branch.

// Fenced wraps c.
// claimed is a connector whose sends each begin with a claim: an empty
// Update of the fenced etcd store, which fails once this instance no longer
// leads. A deposed leader (paused, partitioned) thus posts nothing after
// etcd ended its term; at most a send already past its claim may land. The
// failed claim is an ordinary delivery failure: the effect stays in the
// outbox for the new leader.
type claimed struct {
	chat.Connector
	claimFn func(context.Context) error
}

// claimedDM is claimed for a connector that can also message users directly.
type claimedDM struct {
	claimed
	dm chat.DirectMessenger
}

func Fenced(c chat.Connector, claim func(context.Context) error) chat.Connector {
	cl := claimed{Connector: c, claimFn: claim}
	if dm, ok := c.(chat.DirectMessenger); ok {
		return &claimedDM{claimed: cl, dm: dm}
	}
	return &cl
}

func (c *claimed) claim(ctx context.Context) error {
	if err := c.claimFn(ctx); err != nil {
		return fmt.Errorf("%s: claim before sending: %w", c.Surface(), err)
	}
	return nil
}

func (c *claimed) StartThread(ctx context.Context, channel string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	if err := c.claim(ctx); err != nil {
		return chat.ThreadRef{}, chat.MessageRef{}, err
	}
	return c.Connector.StartThread(ctx, channel, m)
}

func (c *claimed) Reply(ctx context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	if err := c.claim(ctx); err != nil {
		return chat.MessageRef{}, err
	}
	return c.Connector.Reply(ctx, t, m)
}

func (c *claimed) Update(ctx context.Context, ref chat.MessageRef, m chat.Message) error {
	if err := c.claim(ctx); err != nil {
		return err
	}
	return c.Connector.Update(ctx, ref, m)
}

func (c *claimedDM) Direct(ctx context.Context, user string, m chat.Message) (chat.MessageRef, error) {
	if err := c.claim(ctx); err != nil {
		return chat.MessageRef{}, err
	}
	return c.dm.Direct(ctx, user, m)
}
