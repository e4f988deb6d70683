// Package slack is the Slack surface: it receives mentions, thread replies and
// button clicks over Socket Mode or the Events API, and posts, replies,
// updates and sends direct messages through the Web API within Slack's rate
// limits.
//
// An inbound event is verified, queued for the core (events of one thread or
// card in order, the others, such as top-level mentions, at the same time; a
// bounded number at once), and acknowledged to Slack (HTTP
// 200, the envelope's ack) once the core's Handle for it has returned: the
// core has then stored it (deduped by event ID, the request or decision
// committed in one transaction), so a crash after the ack loses nothing.
// Slack wants its ack within 3 s, and does not deliver an acknowledged event
// again: if the core takes longer than Options.AckBudget (default 2.5 s) the
// event is left unacknowledged (HTTP 503, no envelope ack) and logged, its
// handling goes on, and Slack delivers it again, which is acknowledged
// with the core's answer without the core (internal/handled; after a
// restart, the core's dedupe keeps it once); the asker is told the answer
// once. A click, which Slack does not
// deliver again, is acknowledged when its budget runs out and handled
// afterwards (a crash in that window loses it). A refusal is told to its
// actor (an ephemeral message) after the ack.
//
// It uses github.com/slack-go/slack for everything Slack defines: the Web
// API client, Socket Mode framing, Events API parsing and request signing.
// Deduplication is not done here: events carry Slack's event_id (chat.Event.ID)
// and the core dedupes them in the store, so a retry that lands on another
// instance is caught too.
//
// Slack takes no idempotency key on a post, so every post carries its
// message's key in the message metadata, and the connector is a
// chat.Finder: the outbox asks it whether a post in doubt (sent, perhaps,
// by a process that stopped before recording it) is already there, and
// records it instead of posting it twice.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	slackgo "github.com/slack-go/slack"
	"golang.org/x/time/rate"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/ratelimit"
	"github.com/roombridge/roombridge/internal/handled"
	"github.com/roombridge/roombridge/internal/recent"
)

// Modes of receiving events.
const (
	// ModeSocket receives events over a Socket Mode WebSocket (app token).
	ModeSocket = "socket"
	// ModeEvents receives events as signed HTTP requests (Events API).
	ModeEvents = "events"
)

// Defaults of Options.
const (
	// DefaultPostSpacing keeps posts into one channel apart: Slack allows
	// about one chat.postMessage per second per channel.
	DefaultPostSpacing = time.Second
	// DefaultEditSpacing keeps edits of one message apart (docs/design.md §4: status
	// edits at least 1 s apart per message).
	DefaultEditSpacing = time.Second
	// DefaultUpdateEvery and DefaultUpdateBurst budget chat.update for the
	// whole app: Tier 3 is "50+ per minute"; 48 per minute with bursts of 20
	// stays under it.
	DefaultUpdateEvery = 1250 * time.Millisecond
	DefaultUpdateBurst = 20
	// DefaultWorkers is how many inbound events are handled at once.
	DefaultWorkers = 8
	// DefaultQueue bounds the inbound events received but not yet handled;
	// when it is full new events are refused unacknowledged, so Slack
	// delivers them again later.
	DefaultQueue = 1024
	// DefaultAckBudget is how long an inbound event may wait for the core
	// before Slack is answered anyway (Slack wants its ack within 3 s): an
	// event is then left for Slack to deliver again, a click acknowledged.
	DefaultAckBudget = 2500 * time.Millisecond
	// DefaultPingInterval is how long Socket Mode waits for Slack's ping
	// before it reconnects (slack-go's default).
	DefaultPingInterval = 30 * time.Second
)

// handleTimeout bounds the handling of one inbound event, so one stuck
// transaction cannot hold a worker forever.
const handleTimeout = 30 * time.Second

// answeredKeep is how long the connector remembers an event the core
// answered (internal/handled): Slack delivers an unacknowledged event again
// for about 5 minutes (at once, after 1 min, after 5 min).
const answeredKeep = time.Hour

// drainGrace bounds how long Run keeps handling events queued before ctx
// ended (a click may be acknowledged already, its ack budget run out: it
// would be lost otherwise, as Slack does not deliver a click again).
const drainGrace = 5 * time.Second

// Options configure a Connector. Zero values take the defaults.
type Options struct {
	// Mode is ModeSocket (default) or ModeEvents.
	Mode string
	// BotToken (xoxb-) authorizes Web API calls.
	BotToken string
	// AppToken (xapp-) opens Socket Mode connections.
	AppToken string
	// SigningSecret verifies Events API and interactivity requests.
	SigningSecret string
	// APIURL replaces https://slack.com/api/ (tests: a fake Slack).
	APIURL string
	// BroadcastFinal also shows final answers in the channel.
	BroadcastFinal bool
	// HTTPClient makes the Web API calls (default http.DefaultClient).
	HTTPClient *http.Client
	// Log receives the connector's logs (default slog.Default()).
	Log *slog.Logger

	// PostSpacing is the time between the starts of two posts into a
	// channel (default DefaultPostSpacing), and a post starts at least
	// two thirds of it after the previous one returned
	// (ratelimit.NewStartSpacer): Slack counts the posts it sees, so a
	// burst drains at its pace, not one round trip slower per post. A
	// call's way to Slack can be shorter than the previous one's, so two
	// arrivals can be as close as the floor, but never is a post more than
	// one ahead of one per PostSpacing: a burst of two, which Slack
	// tolerates ("short bursts"; docs/perf.md). A post that failed is
	// followed a whole PostSpacing after it returned.
	PostSpacing time.Duration
	// EditSpacing is the same for edits of one message (default DefaultEditSpacing).
	EditSpacing time.Duration
	// UpdateEvery and UpdateBurst are the app-wide chat.update token bucket.
	// The lookups of posts in doubt (conversations.history and
	// conversations.replies, Tier 3 too) get a bucket of the same size.
	UpdateEvery time.Duration
	UpdateBurst int
	// Workers and Queue size the pool that hands inbound events to the core.
	Workers int
	Queue   int
	// AckBudget is the longest an inbound event waits for the core, from
	// its arrival, before Slack is answered anyway (default
	// DefaultAckBudget): an event is then left unacknowledged, for Slack to
	// deliver again, and a click (not delivered again) acknowledged.
	AckBudget time.Duration
	// PingInterval is Socket Mode's ping timeout (default DefaultPingInterval).
	PingInterval time.Duration
	// Clock ages the record of answered events (answeredKeep); nil: real
	// time.
	Clock clock.Clock
}

func (o *Options) setDefaults() {
	if o.Mode == "" {
		o.Mode = ModeSocket
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	o.PostSpacing = cmp(o.PostSpacing, DefaultPostSpacing)
	o.EditSpacing = cmp(o.EditSpacing, DefaultEditSpacing)
	o.UpdateEvery = cmp(o.UpdateEvery, DefaultUpdateEvery)
	o.UpdateBurst = cmp(o.UpdateBurst, DefaultUpdateBurst)
	o.Workers = cmp(o.Workers, DefaultWorkers)
	o.Queue = cmp(o.Queue, DefaultQueue)
	o.AckBudget = cmp(o.AckBudget, DefaultAckBudget)
	o.PingInterval = cmp(o.PingInterval, DefaultPingInterval)
}

// cmp returns v, or def when v is not positive.
func cmp[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Connector is the Slack surface. It implements chat.DirectMessenger and, in
// events mode, serves the webhooks returned by Routes.
type Connector struct {
	opts Options
	api  *slackgo.Client
	log  *slog.Logger

	posts   *ratelimit.Spacer // per channel
	edits   *ratelimit.Spacer // per message
	updates *rate.Limiter     // app-wide chat.update budget
	reads   *rate.Limiter     // app-wide budget of the lookups (FindPosted)
	inbound *pool

	botUser atomic.Pointer[string] // the bot's user ID, from auth.test
	team    atomic.Pointer[string] // the workspace's ID, from auth.test
	live    *streams               // live messages (stream.go)
	sent    *recent.Map            // posts of split messages (long.go)

	dmMu sync.Mutex
	dms  map[string]string // user ID → DM channel ID

	// onAPIError, if set, is told of every failed Web API call: Slack's
	// error code (channel_not_found...), http_<status>, or transport; a
	// rate limit (HTTP 429) has rateLimited set instead (metrics).
	onAPIError func(code string, rateLimited bool)
}

var (
	_ chat.DirectMessenger = (*Connector)(nil)
	_ chat.Finder          = (*Connector)(nil)
)

// New returns a connector. It checks the options but makes no call to Slack
// (Run does).
func New(opts Options) (*Connector, error) {
	opts.setDefaults()
	if opts.BotToken == "" {
		return nil, errors.New("slack: a bot token is required")
	}
	switch opts.Mode {
	case ModeSocket:
		if opts.AppToken == "" {
			return nil, errors.New("slack: socket mode needs an app-level token")
		}
	case ModeEvents:
		if opts.SigningSecret == "" {
			return nil, errors.New("slack: events mode needs the signing secret")
		}
	default:
		return nil, fmt.Errorf("slack: unknown mode %q (want %s or %s)", opts.Mode, ModeSocket, ModeEvents)
	}
	apiOpts := []slackgo.Option{slackgo.OptionHTTPClient(opts.HTTPClient)}
	if opts.APIURL != "" {
		apiOpts = append(apiOpts, slackgo.OptionAPIURL(opts.APIURL))
	}
	if opts.AppToken != "" {
		apiOpts = append(apiOpts, slackgo.OptionAppLevelToken(opts.AppToken))
	}
	// No slackgo.OptionRetry: a 429 becomes a *chat.RetryAfterError and the
	// outbox retries the effect after exactly Retry-After, without holding a
	// delivery goroutine.
	log := opts.Log.With("surface", chat.Slack)
	c := &Connector{
		opts:    opts,
		api:     slackgo.New(opts.BotToken, apiOpts...),
		log:     log,
		posts:   ratelimit.NewStartSpacer(opts.PostSpacing, opts.PostSpacing*2/3),
		edits:   ratelimit.NewSpacer(opts.EditSpacing),
		updates: rate.NewLimiter(rate.Every(opts.UpdateEvery), opts.UpdateBurst),
		reads:   rate.NewLimiter(rate.Every(opts.UpdateEvery), opts.UpdateBurst),
		dms:     map[string]string{},
		live:    newStreams(),
		sent:    recent.New(maxRemembered),
	}
	c.inbound = newPool(opts.Workers, opts.Queue, opts.AckBudget, handled.New(answeredKeep, opts.Clock), log, c.respond)
	return c, nil
}

// ReportAPIErrors sets the hook told of every failed platform call (see
// onAPIError). Call it before Run.
func (c *Connector) ReportAPIErrors(hook func(code string, rateLimited bool)) { c.onAPIError = hook }

// Surface implements chat.Connector.
func (c *Connector) Surface() string { return chat.Slack }

// Run learns the bot's identity, then receives events until ctx ends: over
// Socket Mode, or (events mode) from the webhooks of Routes. Events already
// queued when ctx ends are still handled, for up to drainGrace.
func (c *Connector) Run(ctx context.Context, h chat.Handler) error {
	if err := c.whoAmI(ctx); err != nil {
		return err
	}
	stop := c.inbound.start(ctx)
	var err error
	if c.opts.Mode == ModeSocket {
		err = c.runSocket(ctx, h)
	} else {
		<-ctx.Done()
	}
	stop()
	return err
}

// whoAmI asks auth.test for the bot's user ID (to strip its mention from
// asks). A bad token is fatal; a network failure is not (the mention is then
// recognised by its position).
func (c *Connector) whoAmI(ctx context.Context) error {
	resp, err := c.api.AuthTestContext(ctx)
	if err != nil {
		c.report(err)
		var se slackgo.SlackErrorResponse
		if errors.As(err, &se) && slices.Contains(authErrors, se.Err) {
			return fmt.Errorf("slack: auth.test: %w (check slack.bot_token)", err)
		}
		c.log.WarnContext(ctx, "auth.test failed; continuing", "error", err)
		return nil
	}
	c.botUser.Store(&resp.UserID)
	c.team.Store(&resp.TeamID)
	c.log.InfoContext(ctx, "connected to Slack", "team", resp.Team, "bot_user", resp.UserID, "mode", c.opts.Mode)
	return nil
}

func (c *Connector) teamID() string {
	if p := c.team.Load(); p != nil {
		return *p
	}
	return ""
}

func (c *Connector) botUserID() string {
	if p := c.botUser.Load(); p != nil {
		return *p
	}
	return ""
}

// StartThread posts m as a new top-level message in channel; its ts names
// the thread.
func (c *Connector) StartThread(ctx context.Context, channel string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	ts, err := c.post(ctx, channel, false, c.content(m, false)...)
	if err != nil {
		return chat.ThreadRef{}, chat.MessageRef{}, err
	}
	return chat.ThreadRef{Surface: chat.Slack, Channel: channel, ID: ts},
		chat.MessageRef{Surface: chat.Slack, Channel: channel, ID: ts}, nil
}

// Reply posts m in thread t. A final answer is also broadcast to the channel
// when m asks for it or the connector is configured to. A text too long for
// one message goes in parts or as a file (long.go); the reference is the
// last post's.
func (c *Connector) Reply(ctx context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	broadcast := m.Broadcast || (c.opts.BroadcastFinal && m.Kind == "final")
	ts, err := c.postPlan(ctx, t.Channel, t.ID, m, plan(m), broadcast)
	if err != nil {
		return chat.MessageRef{}, err
	}
	return chat.MessageRef{Surface: chat.Slack, Channel: t.Channel, ID: ts}, nil
}

// Update replaces a posted message with chat.update: at most one edit per
// EditSpacing per message, within the app's chat.update budget. A card
// without buttons replaces one with buttons (an approval's outcome).
func (c *Connector) Update(ctx context.Context, ref chat.MessageRef, m chat.Message) error {
	return c.edits.Do(ctx, ref.Channel+"/"+ref.ID, func() error {
		if err := c.updates.Wait(ctx); err != nil {
			return err
		}
		_, _, _, err := c.api.UpdateMessageContext(ctx, ref.Channel, ref.ID, c.content(m, true)...)
		return c.apiError("chat.update", err)
	})
}

// Direct opens (or reuses) the direct message channel with user and posts m
// there, so an approver gets the card's buttons on their phone.
func (c *Connector) Direct(ctx context.Context, user string, m chat.Message) (chat.MessageRef, error) {
	channel, err := c.dmChannel(ctx, user)
	if err != nil {
		return chat.MessageRef{}, err
	}
	ts, err := c.postPlan(ctx, channel, "", m, plan(m), false)
	if err != nil {
		return chat.MessageRef{}, err
	}
	return chat.MessageRef{Surface: chat.Slack, Channel: channel, ID: ts}, nil
}

func (c *Connector) dmChannel(ctx context.Context, user string) (string, error) {
	c.dmMu.Lock()
	ch, ok := c.dms[user]
	c.dmMu.Unlock()
	if ok {
		return ch, nil
	}
	channel, _, _, err := c.api.OpenConversationContext(ctx, &slackgo.OpenConversationParameters{Users: []string{user}})
	if err != nil {
		return "", c.apiError("conversations.open", err)
	}
	c.dmMu.Lock()
	c.dms[user] = channel.ID
	c.dmMu.Unlock()
	return channel.ID, nil
}

// post sends chat.postMessage into channel, paced per channel. A post
// ahead (into an existing thread, a direct message) goes before the new
// thread parents waiting for the channel: a burst of asks does not keep
// an answer behind every other parent.
func (c *Connector) post(ctx context.Context, channel string, ahead bool, opts ...slackgo.MsgOption) (string, error) {
	var ts string
	do := c.posts.Do
	if ahead {
		do = c.posts.DoAhead
	}
	err := do(ctx, channel, func() error {
		var err error
		_, ts, err = c.api.PostMessageContext(ctx, channel, opts...)
		return c.apiError("chat.postMessage", err)
	})
	return ts, err
}

// content is the text and blocks of m, and for a post its idempotency key
// (in the metadata: FindPosted). For an update, a message without a card
// clears the blocks of the message it replaces.
func (c *Connector) content(m chat.Message, update bool) []slackgo.MsgOption {
	opts := []slackgo.MsgOption{slackgo.MsgOptionText(FallbackText(m), false)}
	switch {
	case m.Card != nil:
		opts = append(opts, slackgo.MsgOptionBlocks(Blocks(*m.Card)...))
	case update:
		opts = append(opts, slackgo.MsgOptionBlocks())
	}
	if !update && m.IdempotencyKey != "" {
		opts = append(opts, slackgo.MsgOptionMetadata(keyMetadata(m.IdempotencyKey)))
	}
	return opts
}

// authErrors are Slack error codes that mean the token is wrong: fatal at
// start, retried (not dropped) on delivery so that fixing the token loses
// nothing.
var authErrors = []string{"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}

// permanentErrors are Slack error codes that no retry can fix: the effect is
// dropped (with an audit record) instead of blocking its thread forever.
var permanentErrors = []string{
	"channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text",
	"invalid_blocks", "invalid_blocks_format", "thread_not_found", "message_not_found",
	"cant_update_message", "edit_window_closed", "user_not_found", "user_disabled",
	"cannot_dm_bot", "users_list_not_supplied", "too_many_attachments", "invalid_arguments",
}

// apiError reports a failed call to onAPIError and classifies its error.
func (c *Connector) apiError(method string, err error) error {
	c.report(err)
	return classify(method, err)
}

// report tells onAPIError the code of a failed call's error (nil: none).
func (c *Connector) report(err error) {
	if err != nil && c.onAPIError != nil && !errors.Is(err, context.Canceled) {
		var rl *slackgo.RateLimitedError
		var se slackgo.SlackErrorResponse
		var sc slackgo.StatusCodeError
		switch {
		case errors.As(err, &rl), errors.As(err, &sc) && sc.Code == http.StatusTooManyRequests:
			c.onAPIError("", true)
		case errors.As(err, &se):
			c.onAPIError(se.Err, false)
		case errors.As(err, &sc):
			c.onAPIError("http_"+strconv.Itoa(sc.Code), false)
		default:
			c.onAPIError("transport", false)
		}
	}
}

// classify turns a Web API error into what the outbox understands: a
// *chat.RetryAfterError for HTTP 429 with Retry-After, chat.ErrPermanent
// for requests Slack will never accept, and a plain error (retried with
// back-off) for everything else: 5xx, network errors, auth errors.
func classify(method string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("slack: %s: %w", method, err)
	var rl *slackgo.RateLimitedError
	if errors.As(err, &rl) {
		return &chat.RetryAfterError{After: rl.RetryAfter, Err: err}
	}
	var se slackgo.SlackErrorResponse
	if errors.As(err, &se) && slices.Contains(permanentErrors, se.Err) {
		return fmt.Errorf("%w: %w", chat.ErrPermanent, err)
	}
	return err
}
