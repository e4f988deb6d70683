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
	uuidSends   map[string]int // sends per uuid, those deduped included
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
	files       []*File          // uploads (files.go)
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
		uuidSends:    map[string]int{},
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
	mux.HandleFunc("POST "+RouteFiles, s.route(RouteFiles, s.authed(s.handleFile)))
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

// Sends counts the creates and replies that carried uuid and were not
// refused (bad input, rate limits), those its dedupe answered with the
// message already sent included.
func (s *Server) Sends(uuid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uuidSends[uuid]
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
