package feishutest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"
)

// Feishu response codes the fake answers with.
const (
	// CodeRateLimited is Feishu's frequency-limit code, sent with HTTP 429.
	CodeRateLimited = 99991400
	// CodeTokenMissing answers an im call without a bearer token.
	CodeTokenMissing = 99991661
	// CodeTokenInvalid answers an im call with a bearer token the fake did not issue.
	CodeTokenInvalid = 99991663
	// CodeFieldValidation answers a request missing a required field.
	CodeFieldValidation = 99992402
	// CodeAppSecretInvalid answers a token request with wrong app credentials.
	CodeAppSecretInvalid = 10014
	// CodeInvalidParam answers an im request Feishu would refuse: unknown message,
	// content that is not JSON, PATCH of a non-card or non-shared card, a card
	// older than 14 days.
	CodeInvalidParam = 230001
	// CodeContentTooLong answers content over Feishu's size limits.
	CodeContentTooLong = 230025
)

// Routes as the SDK names them; FailNext accepts them as well as concrete paths.
const (
	RouteToken      = "/open-apis/auth/v3/tenant_access_token/internal"
	RouteCreate     = "/open-apis/im/v1/messages"
	RouteReply      = "/open-apis/im/v1/messages/:message_id/reply"
	RoutePatch      = "/open-apis/im/v1/messages/:message_id"
	RouteWSEndpoint = larkws.GenEndpointUri
	RouteBotInfo    = "/open-apis/bot/v3/info"
	routeWS         = "/ws"
)

const (
	tokenTTL        = 2 * time.Hour       // expire the fake reports; tokens never really expire
	uuidWindow      = time.Hour           // Feishu: the same uuid sends at most one message per hour
	patchMaxAge     = 14 * 24 * time.Hour // Feishu: only messages younger than 14 days can be patched
	cardMaxBytes    = 30 << 10            // Feishu: card and post content at most 30 KB
	textMaxBytes    = 150 << 10           // Feishu: text content at most 150 KB
	rateWindow      = time.Second         // all enforced limits are per second
	serviceID       = 1                   // service_id handed out in the ws URL
	defaultWriteTTL = 10 * time.Second    // ws write deadline when ctx has none
)

var (
	// ErrClosed is returned by pushes after Close.
	ErrClosed = errors.New("feishutest: server closed")
	// ErrUnknownFrame is returned by Redeliver for a message_id never pushed.
	ErrUnknownFrame = errors.New("feishutest: unknown frame message_id")
)

// Clock tells the fake the time; it must be safe for concurrent use.
// *clock.Fake and similar test clocks satisfy it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// RateLimits are the per-second (sliding window) limits the fake enforces;
// zero disables one. Every request counts, uuid dedupe hits included.
type RateLimits struct {
	PerChat  int // create+reply into one chat (or to one user); Feishu: 5/s
	PerApp   int // calls of one API (create, reply, patch) by the app; Feishu: 50/s
	PerPatch int // PATCHes of one message; Feishu: 5/s
}

// Feishu's documented limits for im/v1/messages.
var defaultRateLimits = RateLimits{PerChat: 5, PerApp: 50, PerPatch: 5}

// Fast, unlimited reconnects without jitter (ReconnectNonce 0), so tests never
// wait for the SDK's defaults (2 min interval, up to 30 s jitter).
var defaultClientConfig = larkws.ClientConfig{PingInterval: 10, ReconnectCount: -1, ReconnectInterval: 1}

// Option configures a Server.
type Option func(*Server)

// WithClock makes the fake read time (rate windows, uuid expiry, create_time) from c.
func WithClock(c Clock) Option { return func(s *Server) { s.clock = c } }

// WithRateLimits replaces Feishu's limits {PerChat: 5, PerApp: 50, PerPatch: 5}.
func WithRateLimits(l RateLimits) Option { return func(s *Server) { s.limits = l } }

// WithBot sets the bot's open_id and name that bot/v3/info reports (by
// default "ou_bot" + a hash of the app's credentials, and "roombridge").
func WithBot(openID, name string) Option {
	return func(s *Server) { s.botOpenID, s.botName = openID, name }
}

// WithClientConfig replaces the long-connection settings the fake sends with
// the endpoint and in every pong, by default {PingInterval: 10,
// ReconnectCount: -1, ReconnectInterval: 1} (seconds). PingInterval must be at
// least 1: the SDK pings in a busy loop at 0.
func WithClientConfig(c larkws.ClientConfig) Option { return func(s *Server) { s.clientConfig = c } }

// Patch is one PATCH applied to a card.
type Patch struct {
	Content json.RawMessage // the card JSON sent
	Time    time.Time
}

// Message is a message the app created or replied with.
type Message struct {
	ID            string          // om_...
	ChatID        string          // chat it lives in; oc_p2p_<open_id> for a create to open_id
	ReceiveID     string          // receive_id of a create; empty for replies
	ReceiveIDType string          // receive_id_type of a create; empty for replies
	MsgType       string          // text, post, interactive, ...
	Content       json.RawMessage // content as first sent (the decoded content string)
	Current       json.RawMessage // content after the latest PATCH; equals Content before any
	RootID        string          // replies only: root of the reply chain
	ParentID      string          // replies only: the message replied to
	ThreadID      string          // omt_...; set on thread roots and thread replies
	ReplyInThread bool            // reply_in_thread as sent
	Sender        string          // open_id of the user who wrote it (AddUserMessage); empty for the app's
	UUID          string          // dedupe key as sent
	CreateTime    time.Time
	Patches       []Patch
}

func (m *Message) clone() Message {
	c := *m
	c.Patches = slices.Clone(m.Patches)
	return c
}

type uuidHit struct {
	id string
	at time.Time
}

type failure struct {
	status, code int
	reset        time.Duration
}

// Server is a fake Feishu Open API and long-connection gateway for one app.
// It serves the tenant token, message create/reply/patch and the long
// connection on a loopback httptest server, records every message and
// response frame, and enforces Feishu's limits and rate limits. It is safe for
// concurrent use.
type Server struct {
	appID, appSecret, token string
	botOpenID, botName      string
	clock                   Clock
	limits                  RateLimits
	clientConfig            larkws.ClientConfig
	srv                     *httptest.Server
	upgrader                websocket.Upgrader
	wg                      sync.WaitGroup // ws read loops

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every state change
	closed      bool
	seq         int
	messages    []*Message
	byID        map[string]*Message
	uuids       map[string]uuidHit
	windows     map[string][]time.Time
	failures    map[string][]failure
	rateLimited int
	tokenReqs   int
	devices     map[string]bool
	conns       []*wsConn
	accepted    int
	next        int // round-robin index into conns
	pushed      map[string]pushedFrame
	responses   map[string][]FrameResponse
	cards       map[string]*Card // CardKit entities (cardkit.go)
	noCardKit   bool
}

// New starts a fake for the app appID/appSecret on a loopback port.
func New(appID, appSecret string, opts ...Option) *Server {
	sum := sha256.Sum256([]byte("feishutest\x00" + appID + "\x00" + appSecret))
	s := &Server{
		appID: appID, appSecret: appSecret,
		// Derived from the credentials, not random: the SDK caches tokens in a
		// process-wide cache keyed by app, so a token from an earlier fake must
		// stay valid here.
		token:        "t-" + hex.EncodeToString(sum[:16]),
		botOpenID:    "ou_bot" + hex.EncodeToString(sum[16:24]),
		botName:      "roombridge",
		clock:        realClock{},
		limits:       defaultRateLimits,
		clientConfig: defaultClientConfig,
		upgrader:     websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }},
		changed:      make(chan struct{}),
		byID:         map[string]*Message{},
		uuids:        map[string]uuidHit{},
		windows:      map[string][]time.Time{},
		failures:     map[string][]failure{},
		devices:      map[string]bool{},
		pushed:       map[string]pushedFrame{},
		responses:    map[string][]FrameResponse{},
		cards:        map[string]*Card{},
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+RouteToken, s.route(RouteToken, s.handleToken))
	mux.HandleFunc("POST "+RouteCreate, s.route(RouteCreate, s.authed(s.handleCreate)))
	mux.HandleFunc("POST /open-apis/im/v1/messages/{message_id}/reply", s.route(RouteReply, s.authed(s.handleReply)))
	mux.HandleFunc("PATCH /open-apis/im/v1/messages/{message_id}", s.route(RoutePatch, s.authed(s.handlePatch)))
	mux.HandleFunc("GET "+RouteBotInfo, s.route(RouteBotInfo, s.authed(s.handleBotInfo)))
	mux.HandleFunc("POST "+RouteWSEndpoint, s.route(RouteWSEndpoint, s.handleEndpoint))
	mux.HandleFunc("GET "+routeWS, s.route(routeWS, s.handleWS))
	s.cardkitRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound, "msg": "404 page not found"}, nil)
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the base URL for lark.WithOpenBaseUrl and larkws.WithDomain.
func (s *Server) URL() string { return s.srv.URL }

// BotOpenID is the bot's open_id: mention it in a MessageEvent to address the app.
func (s *Server) BotOpenID() string { return s.botOpenID }

// TenantToken is the tenant_access_token the fake issues and accepts.
func (s *Server) TenantToken() string { return s.token }

// Close disconnects long-connection clients, stops the server and waits for
// all of its goroutines. Clients with auto-reconnect keep retrying until stopped.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.notifyLocked()
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.ws.Close()
	}
	s.srv.Close()
	s.wg.Wait()
}

// notifyLocked wakes WaitFor callers. s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// WaitFor blocks until cond returns true or ctx ends. cond is re-evaluated
// after every change to the fake's state; it may call the fake's accessors.
func (s *Server) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("feishutest: wait: %w", ctx.Err())
		}
	}
}

// Messages returns every message in creation order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.messages))
	for _, m := range s.messages {
		out = append(out, m.clone())
	}
	return out
}

// Message returns the message with ID id, and whether there is one.
func (s *Server) Message(id string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byID[id]
	if !ok {
		return Message{}, false
	}
	return m.clone(), true
}

// Thread returns the root message rootID followed by all replies under it, in order.
func (s *Server) Thread(rootID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.ID == rootID || m.RootID == rootID {
			out = append(out, m.clone())
		}
	}
	return out
}

// RateLimited counts the rate-limit answers (code 99991400) given, injected ones included.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimited
}

// TokenRequests counts successful tenant_access_token requests.
func (s *Server) TokenRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReqs
}

// AddUserMessage records a text message written by the user openID in
// chatID (under rootID's topic when rootID is set), as a person's message the
// app may reply to, and returns its ID. Put the ID in MessageEvent.MessageID.
func (s *Server) AddUserMessage(chatID, openID, text, rootID string) string {
	content, _ := json.Marshal(map[string]string{"text": text})
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{ChatID: chatID, MsgType: "text", Content: content, Sender: openID}
	if root, ok := s.byID[rootID]; ok {
		m.RootID, m.ParentID, m.ThreadID = root.ID, root.ID, root.ThreadID
	}
	return s.addLocked(m).ID
}

// FailNext makes the next request to path answer HTTP status with Feishu code
// code; reset > 0 adds x-ogw-ratelimit-reset (whole seconds, rounded up).
// path is a concrete path ("/open-apis/im/v1/messages/om_1/reply") or a Route
// constant. Calls queue up per path.
func (s *Server) FailNext(path string, status int, code int, reset time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[path] = append(s.failures[path], failure{status: status, code: code, reset: reset})
}

// route wraps h with FailNext injection for the concrete path or the route.
func (s *Server) route(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		f, ok := s.popFailureLocked(r.URL.Path)
		if !ok {
			f, ok = s.popFailureLocked(route)
		}
		if ok && f.code == CodeRateLimited {
			s.rateLimited++
			s.notifyLocked()
		}
		s.mu.Unlock()
		if !ok {
			h(w, r)
			return
		}
		hdr := http.Header{}
		if f.reset > 0 {
			hdr.Set("x-ogw-ratelimit-reset", strconv.Itoa(int(math.Ceil(f.reset.Seconds()))))
		}
		msg := "injected failure"
		if f.code == CodeRateLimited {
			msg = "request trigger frequency limit"
		}
		writeJSON(w, f.status, map[string]any{"code": f.code, "msg": msg}, hdr)
	}
}

// popFailureLocked dequeues an injected failure for key. s.mu must be held.
func (s *Server) popFailureLocked(key string) (failure, bool) {
	q := s.failures[key]
	if len(q) == 0 {
		return failure{}, false
	}
	s.failures[key] = q[1:]
	return q[0], true
}

// authed checks the bearer tenant token before h.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case !ok || tok == "":
			apiError(w, http.StatusBadRequest, CodeTokenMissing, "Missing access token for authorization. Please make a request with token attached.")
		case tok != s.token:
			apiError(w, http.StatusBadRequest, CodeTokenInvalid, "Invalid access token for authorization. Please make a request with token attached.")
		default:
			h(w, r)
		}
	}
}

func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppID     string `json:"app_id"`
		AppSecret string `json:"app_secret"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AppID == "" || req.AppSecret == "" {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: app_id and app_secret are required")
		return
	}
	if req.AppID != s.appID || req.AppSecret != s.appSecret {
		apiError(w, http.StatusBadRequest, CodeAppSecretInvalid, "app secret invalid")
		return
	}
	s.mu.Lock()
	s.tokenReqs++
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"code": 0, "msg": "ok", "tenant_access_token": s.token, "expire": int(tokenTTL.Seconds()),
	}, nil)
}

// handleBotInfo answers GET bot/v3/info as Feishu does: the bot object beside
// code and msg, not under data.
func (s *Server) handleBotInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "bot": map[string]any{
		"activate_status": 2, "app_name": s.botName, "avatar_url": "", "ip_white_list": []string{}, "open_id": s.botOpenID,
	}}, nil)
}

type sendBody struct {
	ReceiveID     *string `json:"receive_id"`
	MsgType       *string `json:"msg_type"`
	Content       *string `json:"content"`
	UUID          string  `json:"uuid"`
	ReplyInThread bool    `json:"reply_in_thread"`
}

// decodeSend parses and validates a create/reply body; it answers the error itself.
func decodeSend(w http.ResponseWriter, r *http.Request, needReceiver bool) (sendBody, bool) {
	var b sendBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: body is not JSON")
		return b, false
	}
	switch {
	case needReceiver && (b.ReceiveID == nil || *b.ReceiveID == ""):
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: receive_id is required")
	case b.MsgType == nil || *b.MsgType == "":
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: msg_type is required")
	case b.Content == nil:
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: content is required")
	case len(b.UUID) > 50:
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: uuid longer than 50")
	default:
		return b, checkContent(w, *b.MsgType, *b.Content)
	}
	return b, false
}

// checkContent enforces that content is a JSON object within Feishu's size limits.
func checkContent(w http.ResponseWriter, msgType, content string) bool {
	limit := cardMaxBytes
	if msgType == "text" {
		limit = textMaxBytes
	}
	var obj map[string]json.RawMessage
	switch {
	case json.Unmarshal([]byte(content), &obj) != nil:
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid message content: not a JSON object")
	case len(content) > limit:
		apiError(w, http.StatusBadRequest, CodeContentTooLong, fmt.Sprintf("message content longer than %d bytes", limit))
	default:
		return true
	}
	return false
}

var receiveIDTypes = []string{"open_id", "union_id", "user_id", "email", "chat_id"}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	idType := r.URL.Query().Get("receive_id_type")
	if !slices.Contains(receiveIDTypes, idType) {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: receive_id_type must be one of "+strings.Join(receiveIDTypes, ", "))
		return
	}
	b, ok := decodeSend(w, r, true)
	if !ok {
		return
	}
	chatID := *b.ReceiveID
	if idType != "chat_id" {
		chatID = "oc_p2p_" + chatID
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limitedLocked(w, rl{"app:create", s.limits.PerApp}, rl{"chat:" + chatID, s.limits.PerChat}) {
		return
	}
	if m := s.dedupeLocked(b.UUID); m != nil {
		writeOK(w, apiMessageOf(m, s.appID))
		return
	}
	m := s.addLocked(&Message{
		ChatID: chatID, ReceiveID: *b.ReceiveID, ReceiveIDType: idType,
		MsgType: *b.MsgType, Content: json.RawMessage(*b.Content), UUID: b.UUID,
	})
	writeOK(w, apiMessageOf(m, s.appID))
}

func (s *Server) handleReply(w http.ResponseWriter, r *http.Request) {
	b, ok := decodeSend(w, r, false)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parent, ok := s.byID[r.PathValue("message_id")]
	if !ok {
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid message_id: message not found")
		return
	}
	if s.limitedLocked(w, rl{"app:reply", s.limits.PerApp}, rl{"chat:" + parent.ChatID, s.limits.PerChat}) {
		return
	}
	if m := s.dedupeLocked(b.UUID); m != nil {
		writeOK(w, apiMessageOf(m, s.appID))
		return
	}
	rootID := parent.RootID
	if rootID == "" {
		rootID = parent.ID
	}
	m := &Message{
		ChatID: parent.ChatID, MsgType: *b.MsgType, Content: json.RawMessage(*b.Content),
		RootID: rootID, ParentID: parent.ID, ReplyInThread: b.ReplyInThread, UUID: b.UUID,
	}
	// Feishu: a reply to a message already in a topic goes to the topic.
	if b.ReplyInThread || parent.ThreadID != "" {
		root := s.byID[rootID]
		if root.ThreadID == "" {
			s.seq++
			root.ThreadID = fmt.Sprintf("omt_fake%06d", s.seq)
		}
		m.ThreadID = root.ThreadID
	}
	writeOK(w, apiMessageOf(s.addLocked(m), s.appID))
}

func (s *Server) handlePatch(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Content *string `json:"content"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Content == nil {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: content is required")
		return
	}
	if !checkContent(w, "interactive", *b.Content) {
		return
	}
	id := r.PathValue("message_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byID[id]
	now := s.clock.Now()
	switch {
	case !ok:
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid message_id: message not found")
	case m.MsgType != "interactive":
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "only interactive (card) messages can be patched")
	case !sharedCard(m.Current) || !sharedCard(json.RawMessage(*b.Content)):
		apiError(w, http.StatusBadRequest, CodeInvalidParam, `card must be shared before and after the update: config.update_multi=true or schema "2.0"`)
	case now.Sub(m.CreateTime) > patchMaxAge:
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "message older than 14 days cannot be updated")
	case s.limitedLocked(w, rl{"app:patch", s.limits.PerApp}, rl{"patch:" + id, s.limits.PerPatch}):
		// answered 429
	default:
		m.Current = json.RawMessage(*b.Content)
		m.Patches = append(m.Patches, Patch{Content: m.Current, Time: now})
		s.notifyLocked()
		writeOK(w, struct{}{})
	}
}

// sharedCard reports whether a card can be updated for everyone: JSON 2.0
// cards always are, 1.0 cards need config.update_multi.
func sharedCard(card json.RawMessage) bool {
	var c struct {
		Schema string `json:"schema"`
		Config struct {
			UpdateMulti bool `json:"update_multi"`
		} `json:"config"`
	}
	return json.Unmarshal(card, &c) == nil && (c.Schema == "2.0" || c.Config.UpdateMulti)
}

// dedupeLocked returns the message an unexpired uuid already sent. s.mu must be held.
func (s *Server) dedupeLocked(uuid string) *Message {
	if uuid == "" {
		return nil
	}
	hit, ok := s.uuids[uuid]
	if !ok || s.clock.Now().Sub(hit.at) >= uuidWindow {
		return nil
	}
	return s.byID[hit.id]
}

// addLocked assigns id and time to m and records it. s.mu must be held.
func (s *Server) addLocked(m *Message) *Message {
	s.seq++
	m.ID = fmt.Sprintf("om_fake%06d", s.seq)
	m.CreateTime = s.clock.Now()
	m.Current = m.Content
	s.messages = append(s.messages, m)
	s.byID[m.ID] = m
	if m.UUID != "" {
		s.uuids[m.UUID] = uuidHit{id: m.ID, at: m.CreateTime}
	}
	s.notifyLocked()
	return m
}

// rl is one sliding one-second window: key and its limit (0 = unlimited).
type rl struct {
	key   string
	limit int
}

// limitedLocked answers 429 if any window is full; otherwise it charges the
// request to all of them. s.mu must be held.
func (s *Server) limitedLocked(w http.ResponseWriter, limits ...rl) bool {
	now := s.clock.Now()
	var reset time.Duration
	var hit rl
	for _, l := range limits {
		if l.limit <= 0 {
			continue
		}
		win := s.windows[l.key]
		win = slices.DeleteFunc(win, func(t time.Time) bool { return now.Sub(t) >= rateWindow })
		s.windows[l.key] = win
		if len(win) >= l.limit {
			if d := rateWindow - now.Sub(win[0]); d > reset {
				reset, hit = d, l
			}
		}
	}
	if hit.key != "" {
		s.rateLimited++
		s.notifyLocked()
		hdr := http.Header{}
		hdr.Set("x-ogw-ratelimit-limit", strconv.Itoa(hit.limit))
		hdr.Set("x-ogw-ratelimit-reset", strconv.Itoa(int(math.Ceil(reset.Seconds()))))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"code": CodeRateLimited, "msg": "request trigger frequency limit"}, hdr)
		return true
	}
	for _, l := range limits {
		if l.limit > 0 {
			s.windows[l.key] = append(s.windows[l.key], now)
		}
	}
	return false
}

type apiSender struct {
	ID         string `json:"id"`
	IDType     string `json:"id_type"`
	SenderType string `json:"sender_type"`
}

type apiBody struct {
	Content string `json:"content"`
}

// apiMessage is the message shape of create/reply responses.
type apiMessage struct {
	MessageID  string    `json:"message_id"`
	RootID     string    `json:"root_id,omitempty"`
	ParentID   string    `json:"parent_id,omitempty"`
	ThreadID   string    `json:"thread_id,omitempty"`
	MsgType    string    `json:"msg_type"`
	CreateTime string    `json:"create_time"`
	UpdateTime string    `json:"update_time"`
	Deleted    bool      `json:"deleted"`
	Updated    bool      `json:"updated"`
	ChatID     string    `json:"chat_id"`
	Sender     apiSender `json:"sender"`
	Body       apiBody   `json:"body"`
}

func apiMessageOf(m *Message, appID string) apiMessage {
	ms := strconv.FormatInt(m.CreateTime.UnixMilli(), 10)
	return apiMessage{
		MessageID: m.ID, RootID: m.RootID, ParentID: m.ParentID, ThreadID: m.ThreadID,
		MsgType: m.MsgType, CreateTime: ms, UpdateTime: ms, ChatID: m.ChatID,
		Sender: apiSender{ID: appID, IDType: "app_id", SenderType: "app"},
		Body:   apiBody{Content: string(m.Content)},
	}
}

func writeOK(w http.ResponseWriter, data any) {
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "success", "data": data}, nil)
}

func apiError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"code": code, "msg": msg}, nil)
}

// writeJSON writes v with the Content-Type the SDK requires to parse a body.
func writeJSON(w http.ResponseWriter, status int, v any, hdr http.Header) {
	for k, vs := range hdr {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
