// Package feishu is the Feishu (Lark) surface: a topic thread per request
// whose root is a live interactive card, approval cards with buttons, and
// inbound events over the long connection (ws, default) or the HTTP callback
// (POST /feishu/events), all through the official SDK
// (github.com/larksuite/oapi-sdk-go/v3).
//
// The connector never touches the store: the core dedupes events (by
// header.event_id), orders and retries sends (the outbox). The connector
// verifies and answers inbound events within Feishu's 3 s, paces sends
// under Feishu's rate limits, sends every message with a uuid derived from the
// effect's idempotency key (so Feishu drops a retried send too), and maps
// Feishu's answers to errors the outbox understands: chat.RetryAfterError for
// 429/99991400 (after x-ogw-ratelimit-reset), chat.ErrPermanent for a
// request Feishu refuses.
package feishu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lark "github.com/larksuite/oapi-sdk-go/v3"
	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/connectors/ratelimit"
	"github.com/roombridge/roombridge/internal/handled"
	"github.com/roombridge/roombridge/internal/lanes"
	"github.com/roombridge/roombridge/internal/recent"
)

// Modes of receiving events.
const (
	ModeWS       = "ws"       // the long connection (larkws)
	ModeCallback = "callback" // HTTP POST /feishu/events
)

// Feishu answer codes the connector acts on.
const (
	codeRateLimited = 99991400 // "request trigger frequency limit", with HTTP 429
	// Per-chat send limits some tenants answer with (third-party reports).
	codeChatLimited    = 230020
	codeChatLimitedOld = 11232
)

// tokenCodes are Feishu's access-token errors: transient (a new token fixes
// them), never a reason to drop a message.
var tokenCodes = map[int]bool{99991661: true, 99991663: true, 99991664: true, 99991665: true, 99991668: true, 99991671: true}

// maxUUID is the longest uuid Feishu accepts on a send.
const maxUUID = 50

// Defaults.
const (
	// DefaultAckBudget is how long an inbound event may wait for the core
	// before it is answered anyway (Feishu re-pushes after 3 s): a message
	// with an error (Feishu pushes it again), a click acknowledged.
	DefaultAckBudget = 2500 * time.Millisecond
	// DefaultWorkers is how many inbound events are handled at once.
	DefaultWorkers = 8
	// DefaultQueue bounds the inbound events received and not yet handled;
	// when it is full new events are answered with an error, so Feishu
	// pushes them again later.
	DefaultQueue = 1024
	// DefaultEditEvery spaces edits of one message (the design's coalescing
	// rule: status edits at least 1 s apart per message).
	DefaultEditEvery = time.Second
	// handlerTimeout bounds the core's work on one inbound event.
	handlerTimeout = 30 * time.Second
	// requestTimeout bounds one Open API call.
	requestTimeout = 15 * time.Second
)

// Limits are Feishu's documented rate limits, per second; the connector paces
// itself at 80% of each so that latency jitter never trips them.
type Limits struct {
	PerChat    int // messages into one chat, or to one user (Feishu: 5)
	PerApp     int // calls of one API (create, reply, patch) by the app (Feishu: 50)
	PerMessage int // PATCHes of one message (Feishu: 5)
}

// DefaultLimits are Feishu's limits for im/v1/messages.
var DefaultLimits = Limits{PerChat: 5, PerApp: 50, PerMessage: 5}

// Options configure a Connector.
type Options struct {
	Mode              string // ModeWS (default) or ModeCallback
	AppID, AppSecret  string
	VerificationToken string // checked on HTTP callbacks; empty: not checked
	EncryptKey        string // decrypts and signs HTTP callbacks; empty: plain bodies
	// BaseURL is the Open API base (default https://open.feishu.cn); tests
	// point it at feishutest.
	BaseURL string
	// BotOpenID is the bot's open_id, to tell mentions of the bot from others;
	// empty: asked from bot/v3/info on first need.
	BotOpenID string
	Limits    Limits        // zero fields: DefaultLimits
	EditEvery time.Duration // zero: DefaultEditEvery
	AckBudget time.Duration // zero: DefaultAckBudget
	// Workers and Queue size the pool that hands inbound events to the
	// core in order per topic (zero: DefaultWorkers, DefaultQueue).
	Workers, Queue int
	Clock          clock.Clock  // timestamps of callbacks; nil: real time
	Log            *slog.Logger // nil: slog.Default()
	// HTTPClient, if set, makes the Open API calls.
	HTTPClient *http.Client
}

// Connector is the Feishu surface. It implements chat.DirectMessenger, and
// Routes for the HTTP callback.
type Connector struct {
	opts  Options
	cli   *lark.Client
	log   *slog.Logger
	clock clock.Clock
	disp  *dispatcher.EventDispatcher

	handler  atomic.Pointer[chat.Handler]
	running  atomic.Int32       // Run calls in progress: HTTP events are served only then
	queue    *lanes.Lanes[*job] // inbound events waiting for the core, in lanes (pool.go)
	wg       sync.WaitGroup     // notices outliving their event (track)
	trackMu  sync.Mutex         // orders track's wg.Add and submit's queueing before Run's last decrement of running
	answered *handled.Set       // events the core answered, and whether they were told (pool.go)
	topics   *recent.Map        // the topic of each card posted in one (Update)

	perChat *ratelimit.Spacer // sends into one chat, from their starts (chatFloor); key: chat ID (p2p: p2pChats.key)
	p2p     p2pChats          // the p2p chat of each user, for perChat's key
	perMsg  *ratelimit.Spacer // PATCHes of one message; key: message ID
	perAPI  *ratelimit.Keyed  // app-wide budget of each API; key: API name
	live    *liveCards        // live messages (stream.go)

	botMu    sync.Mutex
	botID    string
	botTried time.Time

	// onAPIError, if set, is told of every failed Open API send: Feishu's
	// error code, http_<status>, or transport; a rate limit (HTTP 429,
	// 99991400 and the per-chat limit codes) has rateLimited set instead
	// (metrics).
	onAPIError func(code string, rateLimited bool)
}

var _ chat.DirectMessenger = (*Connector)(nil)

// New returns a connector for the app in o.
func New(o Options) (*Connector, error) {
	if o.AppID == "" || o.AppSecret == "" {
		return nil, errors.New("feishu: app_id and app_secret are required")
	}
	switch o.Mode {
	case "":
		o.Mode = ModeWS
	case ModeWS, ModeCallback:
	default:
		return nil, fmt.Errorf("feishu: unknown mode %q (want ws or callback)", o.Mode)
	}
	if o.Mode == ModeCallback && o.VerificationToken == "" && o.EncryptKey == "" {
		return nil, errors.New("feishu: callback mode needs a verification token or an encrypt key")
	}
	if o.BaseURL == "" {
		o.BaseURL = lark.FeishuBaseUrl
	}
	if o.Limits.PerChat <= 0 {
		o.Limits.PerChat = DefaultLimits.PerChat
	}
	if o.Limits.PerApp <= 0 {
		o.Limits.PerApp = DefaultLimits.PerApp
	}
	if o.Limits.PerMessage <= 0 {
		o.Limits.PerMessage = DefaultLimits.PerMessage
	}
	if o.EditEvery <= 0 {
		o.EditEvery = DefaultEditEvery
	}
	if o.AckBudget <= 0 {
		o.AckBudget = DefaultAckBudget
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("surface", chat.Feishu)
	sdkLog := newSDKLogger(log, o.AppSecret, o.VerificationToken, o.EncryptKey)
	copts := []lark.ClientOptionFunc{
		lark.WithOpenBaseUrl(o.BaseURL), lark.WithLogger(sdkLog), lark.WithLogLevel(larkcore.LogLevelWarn),
		lark.WithReqTimeout(requestTimeout),
	}
	if o.HTTPClient != nil {
		copts = append(copts, lark.WithHttpClient(o.HTTPClient))
	}
	c := &Connector{
		opts:    o,
		cli:     lark.NewClient(o.AppID, o.AppSecret, copts...),
		log:     log,
		clock:   o.Clock,
		perChat: ratelimit.NewStartSpacer(spacing(o.Limits.PerChat), chatFloor(o.Limits.PerChat)),
		perMsg:  ratelimit.NewSpacer(max(spacing(o.Limits.PerMessage), o.EditEvery)),
		perAPI:  ratelimit.NewKeyed(pace(o.Limits.PerApp), 1),
		botID:   o.BotOpenID,
		live:    newLiveCards(),
		topics:  recent.New(maxTopics),
		queue:   lanes.New[*job](o.Queue),

		answered: handled.New(answeredKeep, o.Clock),
	}
	// One dispatcher serves both modes (ws frames and verified HTTP bodies).
	c.disp = dispatcher.NewEventDispatcher(o.VerificationToken, o.EncryptKey).
		OnP2MessageReceiveV1(c.onMessage).
		OnP2MessageRecalledV1(c.onRecalled).
		OnP2CardActionTrigger(c.onCardAction)
	c.disp.InitConfig(larkevent.WithLogger(sdkLog), larkevent.WithLogLevel(larkcore.LogLevelWarn))
	return c, nil
}

// spacing is the time between two calls of one key (from the end of one
// to the start of the next for PATCHes, between their starts for sends,
// with chatFloor) that keeps a limit of perSecond calls in any one-second
// window, with a 10% margin for the platform's own clock.
func spacing(perSecond int) time.Duration {
	return time.Duration(1.1 * float64(time.Second) / float64(perSecond))
}

// chatFloor is the least gap between a send's answer and the start of the
// next send into the same chat: sends into a chat start spacing apart
// (Feishu counts the requests it sees per second, so a burst drains at
// its pace, not one round trip slower per send), and at least chatFloor
// after the previous one returned, so that whatever each send's latency,
// any perSecond+1 in a row arrive at least (perSecond-1)·spacing +
// chatFloor apart: over 1.05 s, never perSecond+1 within a second
// (ratelimit.NewStartSpacer). Two thirds of the spacing at least, at most
// all of it (one send a second: spaced from the end).
func chatFloor(perSecond int) time.Duration {
	every := spacing(perSecond)
	return min(every, max(every*2/3, 1050*time.Millisecond-time.Duration(perSecond-1)*every))
}

// pace is the token interval of an app-wide budget of perSecond calls (calls
// run concurrently there, so the margin is wider: 20%, bursts of one).
func pace(perSecond int) time.Duration {
	return time.Duration(float64(time.Second) / (0.8 * float64(perSecond)))
}

// ReportAPIErrors sets the hook told of every failed platform call (see
// onAPIError). Call it before Run.
func (c *Connector) ReportAPIErrors(hook func(code string, rateLimited bool)) { c.onAPIError = hook }

// Surface implements chat.Connector.
func (c *Connector) Surface() string { return chat.Feishu }

// Receiving reports whether Run is receiving events: until it is, HTTP
// callbacks answer 503 (and Feishu pushes them again).
func (c *Connector) Receiving() bool { return c.running.Load() > 0 }

// Run receives events until ctx ends: over the long connection in ws mode; in
// callback mode they come through Routes and Run only waits. Its workers
// hand the events to the core (pool.go); when ctx ends, the events queued
// are still handled, for up to drainGrace.
func (c *Connector) Run(ctx context.Context, h chat.Handler) error {
	c.handler.Store(&h)
	defer c.serve(ctx)()
	if c.opts.Mode == ModeCallback {
		c.log.InfoContext(ctx, "feishu: receiving events over HTTP", "path", EventsPath)
		<-ctx.Done()
		return nil
	}
	sdkLog := newSDKLogger(c.log, c.opts.AppSecret, c.opts.VerificationToken, c.opts.EncryptKey)
	ws := larkws.NewClient(c.opts.AppID, c.opts.AppSecret,
		larkws.WithEventHandler(c.disp), larkws.WithDomain(c.opts.BaseURL),
		larkws.WithLogger(sdkLog), larkws.WithLogLevel(larkcore.LogLevelWarn), larkws.WithAutoReconnect(true),
		larkws.WithOnReady(func() { c.log.InfoContext(ctx, "feishu: long connection ready") }),
		larkws.WithOnReconnecting(func() { c.log.WarnContext(ctx, "feishu: long connection lost; reconnecting") }),
	)
	err := ws.Start(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("feishu: long connection: %w", err)
	}
	return nil
}

// current returns the handler events go to (set by Run or Routes).
func (c *Connector) current() chat.Handler {
	if h := c.handler.Load(); h != nil {
		return *h
	}
	return nil
}

// StartThread posts m as an interactive card into chat channel; the card is
// the root of the request's topic and is updated in place later.
func (c *Connector) StartThread(ctx context.Context, channel string, m chat.Message) (chat.ThreadRef, chat.MessageRef, error) {
	content, err := cardContent(m, "")
	if err != nil {
		return chat.ThreadRef{}, chat.MessageRef{}, err
	}
	id, _, err := c.create(ctx, larkim.CreateMessageV1ReceiveIDTypeChatId, channel, channel, larkim.MsgTypeInteractive, content, m.IdempotencyKey)
	if err != nil {
		return chat.ThreadRef{}, chat.MessageRef{}, err
	}
	c.keepTopic(id, id) // the root of its own topic
	return chat.ThreadRef{Surface: chat.Feishu, Channel: channel, ID: id},
		chat.MessageRef{Surface: chat.Feishu, Channel: channel, ID: id}, nil
}

// Reply posts m in the topic of t (reply_in_thread). Feishu cannot also show
// a topic reply in the chat, so m.Broadcast has no effect here.
func (c *Connector) Reply(ctx context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	send := func(msgType, content, key string) (string, error) {
		return c.reply(ctx, t.Channel, t.ID, msgType, content, key, true)
	}
	id, err := c.sendMessage(ctx, m, t.ID, send)
	if err != nil {
		return chat.MessageRef{}, err
	}
	if m.Card != nil {
		c.keepTopic(id, t.ID)
	}
	return chat.MessageRef{Surface: chat.Feishu, Channel: t.Channel, ID: id}, nil
}

// Update replaces a posted card with m rendered as a card (PATCH; JSON 2.0
// cards are shared, so every viewer sees the update), its buttons naming the
// topic the card was posted in (topics). Edits of one message are spaced by
// EditEvery; the outbox coalesces the ones that wait.
func (c *Connector) Update(ctx context.Context, ref chat.MessageRef, m chat.Message) error {
	content, err := cardContent(m, c.topic(ref.ID))
	if err != nil {
		return err
	}
	return c.perMsg.Do(ctx, ref.ID, func() error {
		if err := c.perAPI.Wait(ctx, "patch"); err != nil {
			return err
		}
		resp, err := c.cli.Im.V1.Message.Patch(ctx, larkim.NewPatchMessageReqBuilder().MessageId(ref.ID).
			Body(larkim.NewPatchMessageReqBodyBuilder().Content(content).Build()).Build())
		if resp == nil {
			return c.apiError("update", nil, larkcore.CodeError{}, err)
		}
		return c.apiError("update", resp.ApiResp, resp.CodeError, err)
	})
}

// Direct sends m to the user with open_id user (receive_id_type open_id), so
// an approver has the card's buttons in their chat with the bot.
func (c *Connector) Direct(ctx context.Context, user string, m chat.Message) (chat.MessageRef, error) {
	var chatID string
	send := func(msgType, content, key string) (id string, err error) {
		id, chatID, err = c.create(ctx, larkim.CreateMessageV1ReceiveIDTypeOpenId, user, c.p2p.key(user), msgType, content, key)
		return id, err
	}
	id, err := c.sendMessage(ctx, m, "", send)
	if err != nil {
		return chat.MessageRef{}, err
	}
	c.p2p.learn(user, chatID)
	return chat.MessageRef{Surface: chat.Feishu, Channel: chatID, ID: id}, nil
}

// sendMessage sends m through send: as a card (its buttons naming topic,
// see cardContent) when it has one, else as text (sendText: in parts or as
// a file when it is long).
func (c *Connector) sendMessage(ctx context.Context, m chat.Message, topic string, send sendFunc) (string, error) {
	if m.Card == nil {
		return c.sendText(ctx, m, send)
	}
	content, err := cardContent(m, topic)
	if err != nil {
		return "", err
	}
	return send(larkim.MsgTypeInteractive, content, m.IdempotencyKey)
}

// create sends a new message (POST im/v1/messages) and returns its ID and chat.
func (c *Connector) create(ctx context.Context, idType, receiveID, limitKey, msgType, content, key string) (id, chatID string, err error) {
	body := larkim.NewCreateMessageReqBodyBuilder().ReceiveId(receiveID).MsgType(msgType).Content(content)
	if u := uuidFor(key); u != "" {
		body.Uuid(u)
	}
	req := larkim.NewCreateMessageReqBuilder().ReceiveIdType(idType).Body(body.Build()).Build()
	err = c.perChat.Do(ctx, limitKey, func() error {
		if err := c.perAPI.Wait(ctx, "create"); err != nil {
			return err
		}
		resp, err := c.cli.Im.V1.Message.Create(ctx, req)
		if resp == nil {
			return c.apiError("send", nil, larkcore.CodeError{}, err)
		}
		if err := c.apiError("send", resp.ApiResp, resp.CodeError, err); err != nil {
			return err
		}
		if resp.Data == nil || resp.Data.MessageId == nil {
			return errors.New("feishu: send: answer without message_id")
		}
		id, chatID = *resp.Data.MessageId, receiveID
		if resp.Data.ChatId != nil {
			chatID = *resp.Data.ChatId
		}
		if chatID != limitKey {
			// Sent by user (a p2p chat): its sends by chat ID wait for
			// this one and are spaced from it.
			c.perChat.Share(limitKey, chatID)
		}
		return nil
	})
	return id, chatID, err
}

// reply answers message parent in chat (POST im/v1/messages/:id/reply).
func (c *Connector) reply(ctx context.Context, chatID, parent, msgType, content, key string, inThread bool) (id string, err error) {
	body := larkim.NewReplyMessageReqBodyBuilder().MsgType(msgType).Content(content).ReplyInThread(inThread)
	if u := uuidFor(key); u != "" {
		body.Uuid(u)
	}
	req := larkim.NewReplyMessageReqBuilder().MessageId(parent).Body(body.Build()).Build()
	err = c.perChat.DoAhead(ctx, chatID, func() error { // in a thread: ahead of new parents
		if err := c.perAPI.Wait(ctx, "reply"); err != nil {
			return err
		}
		resp, err := c.cli.Im.V1.Message.Reply(ctx, req)
		if resp == nil {
			return c.apiError("reply", nil, larkcore.CodeError{}, err)
		}
		if err := c.apiError("reply", resp.ApiResp, resp.CodeError, err); err != nil {
			return err
		}
		if resp.Data == nil || resp.Data.MessageId == nil {
			return errors.New("feishu: reply: answer without message_id")
		}
		id = *resp.Data.MessageId
		return nil
	})
	return id, err
}

// apiError reports a failed call to onAPIError and classifies its answer.
func (c *Connector) apiError(op string, resp *larkcore.ApiResp, ce larkcore.CodeError, err error) error {
	out := classify(op, resp, ce, err)
	if out == nil || c.onAPIError == nil || errors.Is(err, context.Canceled) {
		return out
	}
	var ra *chat.RetryAfterError
	switch {
	case errors.As(out, &ra):
		c.onAPIError("", true)
	case err != nil:
		c.onAPIError("transport", false)
	case ce.Code != 0:
		c.onAPIError(strconv.Itoa(ce.Code), false)
	default:
		c.onAPIError("http_"+strconv.Itoa(resp.StatusCode), false)
	}
	return out
}

// classify turns an Open API answer into the error the outbox acts on: nil,
// a *chat.RetryAfterError (rate limited: retry after exactly the reset
// Feishu names), an error wrapping chat.ErrPermanent (Feishu refused the
// request itself: retrying cannot help), or a plain transient error.
func classify(op string, resp *larkcore.ApiResp, ce larkcore.CodeError, err error) error {
	if err != nil {
		return fmt.Errorf("feishu: %s: %w", op, err)
	}
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	if ce.Code == 0 && (status == 0 || status < 300) {
		return nil
	}
	cause := fmt.Errorf("feishu: %s: HTTP %d, code %d: %s", op, status, ce.Code, ce.Msg)
	switch {
	case status == http.StatusTooManyRequests || ce.Code == codeRateLimited ||
		ce.Code == codeChatLimited || ce.Code == codeChatLimitedOld:
		after := time.Second
		if resp != nil {
			if s, perr := strconv.Atoi(resp.Header.Get("x-ogw-ratelimit-reset")); perr == nil && s > 0 {
				after = time.Duration(s) * time.Second
			}
		}
		return &chat.RetryAfterError{After: after, Err: cause}
	case status >= 500 || tokenCodes[ce.Code]:
		return cause
	default:
		return fmt.Errorf("%w: %w", chat.ErrPermanent, cause)
	}
}

// uuidFor derives Feishu's send uuid from an idempotency key: the key itself
// when it fits (at most 50 characters of a safe alphabet), else a hash of it.
func uuidFor(key string) string {
	if key == "" {
		return ""
	}
	if len(key) <= maxUUID && safeUUID(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "rb-" + hex.EncodeToString(sum[:])[:40]
}

func safeUUID(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '/', r == ':', r == '.':
		default:
			return false
		}
	}
	return true
}

// sdkLogger routes the SDK's logs to slog with the app's secrets masked,
// and drops its debug lines: the long-connection client ignores the log
// level it is given once it has a logger, and its debug lines carry whole
// event payloads, verification token included.
type sdkLogger struct {
	log    *slog.Logger
	redact *strings.Replacer
}

// newSDKLogger returns an sdkLogger that masks secrets (empty ones are
// skipped).
func newSDKLogger(log *slog.Logger, secrets ...string) sdkLogger {
	var pairs []string
	for _, s := range secrets {
		if s != "" {
			pairs = append(pairs, s, "[redacted]")
		}
	}
	return sdkLogger{log: log, redact: strings.NewReplacer(pairs...)}
}

func (l sdkLogger) detail(args []any) string { return l.redact.Replace(fmt.Sprint(args...)) }

// Debug drops the line (see sdkLogger).
func (l sdkLogger) Debug(context.Context, ...any) {}
func (l sdkLogger) Info(ctx context.Context, args ...any) {
	l.log.InfoContext(ctx, "lark sdk", "detail", l.detail(args))
}
func (l sdkLogger) Warn(ctx context.Context, args ...any) {
	l.log.WarnContext(ctx, "lark sdk", "detail", l.detail(args))
}
func (l sdkLogger) Error(ctx context.Context, args ...any) {
	l.log.ErrorContext(ctx, "lark sdk", "detail", l.detail(args))
}
