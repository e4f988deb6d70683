package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/roombridge/roombridge/chat"
)

// runSocket receives events over Socket Mode until ctx ends. slack-go holds
// the connection: it opens it with apps.connections.open, reconnects with
// jittered back-off on errors, disconnect requests and missed pings, and
// returns only on fatal auth errors. Each envelope's events are queued for
// the core on this goroutine (in the order Slack sent them); the envelope is
// acknowledged, off it, once the core has handled them (delivery.wait). An
// envelope that cannot be queued, whose event the core failed on our side,
// or whose event's ack budget ran out (a click's is acknowledged then) is
// left unacknowledged so that Slack delivers it again (with retry_attempt;
// the core dedupes it); one still waiting when ctx ends is not acknowledged
// either (the next leader gets it again, and the core dedupes it if it was
// handled).
func (c *Connector) runSocket(ctx context.Context, h chat.Handler) error {
	smc := socketmode.New(c.api,
		socketmode.OptionPingInterval(c.opts.PingInterval),
		socketmode.OptionLog(slogOutput{c}))
	var acks sync.WaitGroup
	defer acks.Wait() // after cancel: acks still waiting give up
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- smc.RunContext(ctx) }()
	for {
		select {
		case err := <-runErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack: socket mode: %w", err)
		case evt := <-smc.Events:
			c.onSocketEvent(ctx, smc, h, evt, &acks)
		}
	}
}

func (c *Connector) onSocketEvent(ctx context.Context, smc *socketmode.Client, h chat.Handler, evt socketmode.Event, acks *sync.WaitGroup) {
	arrived := time.Now()
	var events []chat.Event
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		if ev, ok := evt.Data.(slackevents.EventsAPIEvent); ok {
			if cev, ok := c.fromEventsAPI(ev); ok {
				events = append(events, cev)
			}
		}
	case socketmode.EventTypeInteractive:
		if ic, ok := evt.Data.(slackgo.InteractionCallback); ok {
			events = fromInteraction(ic)
		}
	case socketmode.EventTypeSlashCommand:
	case socketmode.EventTypeErrorBadMessage:
		c.ackBadMessage(ctx, smc, evt)
		return
	case socketmode.EventTypeConnected:
		c.log.InfoContext(ctx, "socket mode connected")
		return
	case socketmode.EventTypeConnectionError:
		if ctx.Err() != nil {
			return
		}
		c.log.WarnContext(ctx, "socket mode connection failed; retrying", "error", errorOf(evt.Data))
		return
	case socketmode.EventTypeInvalidAuth:
		c.log.ErrorContext(ctx, "socket mode: invalid app token (slack.app_token)")
		return
	default:
		return
	}
	if evt.Request == nil {
		return
	}
	id := evt.Request.EnvelopeID
	d, ok := c.inbound.submit(h, arrived, events...)
	if !ok {
		return // not acknowledged: Slack redelivers it
	}
	acks.Go(func() {
		if !d.wait(ctx) || ctx.Err() != nil {
			return // not acknowledged: Slack delivers it again
		}
		if err := smc.AckCtx(ctx, id, nil); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "socket mode ack failed", "envelope_id", id, "error", err)
		}
	})
}

// ackBadMessage acknowledges an envelope slack-go could not parse: it will
// not parse better when Slack delivers it again.
func (c *Connector) ackBadMessage(ctx context.Context, smc *socketmode.Client, evt socketmode.Event) {
	bad, ok := evt.Data.(*socketmode.ErrorBadMessage)
	if !ok {
		return
	}
	var env struct {
		EnvelopeID string `json:"envelope_id"`
	}
	if json.Unmarshal(bad.Message, &env) != nil || env.EnvelopeID == "" {
		c.log.DebugContext(ctx, "socket mode: unparsed frame", "error", bad.Cause)
		return
	}
	c.log.WarnContext(ctx, "socket mode: unparsable envelope acknowledged", "envelope_id", env.EnvelopeID, "error", bad.Cause)
	if err := smc.AckCtx(ctx, env.EnvelopeID, nil); err != nil && ctx.Err() == nil {
		c.log.WarnContext(ctx, "socket mode ack failed", "envelope_id", env.EnvelopeID, "error", err)
	}
}

func errorOf(data any) error {
	if e, ok := data.(*slackgo.ConnectionErrorEvent); ok {
		return e.ErrorObj
	}
	return errors.New("unknown")
}

// slogOutput sends slack-go's internal log lines (printed only in its debug
// mode) to our logger at debug level.
type slogOutput struct{ c *Connector }

func (o slogOutput) Output(_ int, s string) error {
	o.c.log.Debug(s, "component", "socketmode")
	return nil
}
