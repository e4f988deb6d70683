package feishutest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
	case msgType == "interactive" && obj["schema"] != nil: // a 1.0 card (no schema) is held to its size only
		if err := CheckCard([]byte(content)); err != nil {
			apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid card: "+err.Error())
			return false
		}
		return true
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
	if s.unknownFileLocked(*b.MsgType, *b.Content) {
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid file_key")
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
	if s.unknownFileLocked(*b.MsgType, *b.Content) {
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid file_key")
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

// dedupeLocked counts a send of uuid and returns the message an unexpired
// uuid already sent. s.mu must be held.
func (s *Server) dedupeLocked(uuid string) *Message {
	if uuid == "" {
		return nil
	}
	s.uuidSends[uuid]++
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
