package threads

import (
	"context"
	"fmt"

	"github.com/roombridge/roombridge/chat"
)

// Fenced returns conn with each send preceded by claim: in HA, an empty
// Update of the fenced store, which fails once this instance no longer
// leads. A deposed leader (paused, partitioned) thus posts nothing after
// etcd ended its term; at most a send already past its claim may land. A
// failed claim is an ordinary delivery failure: the effect stays in the
// outbox for the next leader.
//
// Fenced keeps every ability of conn. The value it returns is a plain
// Connector (its StartThread, Reply and Update claim first), but a Deliverer
// given it sends through conn itself: it finds conn's optional interfaces
// (chat.DirectMessenger, chat.Finder, any added later) by its usual type
// assertions on conn, and makes the claim itself before every delivery
// attempt. So no optional interface needs code here, and none can be
// forgotten: a wrapper that had to forward each one dropped chat.Finder,
// and a parent in doubt was posted twice after a failover.
func Fenced(conn chat.Connector, claim func(context.Context) error) chat.Connector {
	return &fenced{inner: conn, claim: claim}
}

// fenced is what Fenced returns.
type fenced struct {
	inner chat.Connector
	claim func(context.Context) error
}

// route is how a Deliverer reaches one surface: the connector itself
// (unwrapped: all of its abilities) and the claims to make before each send.
type route struct {
	conn   chat.Connector
	claims []func(context.Context) error
}

// routeOf unwraps c's fences (outermost first).
func routeOf(c chat.Connector) route {
	var r route
	for {
		f, ok := c.(*fenced)
		if !ok {
			r.conn = c
			return r
		}
		r.claims = append(r.claims, f.claim)
		c = f.inner
	}
}

// claim makes r's claims; the first that fails says why nothing may be sent.
func (r route) claim(ctx context.Context) error {
	for _, claim := range r.claims {
		if err := claim(ctx); err != nil {
			return fmt.Errorf("%s: claim before sending: %w", r.conn.Surface(), err)
		}
	}
	return nil
}

// Surface implements chat.Connector.
func (f *fenced) Surface() string { return f.inner.Surface() }

// Run implements chat.Connector: inbound events need no claim.
func (f *fenced) Run(ctx context.Context, h chat.Handler) error { return f.inner.Run(ctx, h) }

// StartThread implements chat.Connector, after the claim.
func (f *fenced) StartThread(ctx context.Context, channel string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	r := routeOf(f)
	if err := r.claim(ctx); err != nil {
		return chat.ThreadRef{}, chat.MessageRef{}, err
	}
	return r.conn.StartThread(ctx, channel, m)
}

// Reply implements chat.Connector, after the claim.
func (f *fenced) Reply(ctx context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	r := routeOf(f)
	if err := r.claim(ctx); err != nil {
		return chat.MessageRef{}, err
	}
	return r.conn.Reply(ctx, t, m)
}

// Update implements chat.Connector, after the claim.
func (f *fenced) Update(ctx context.Context, ref chat.MessageRef, m chat.Message) error {
	r := routeOf(f)
	if err := r.claim(ctx); err != nil {
		return err
	}
	return r.conn.Update(ctx, ref, m)
}
