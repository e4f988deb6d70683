package feishutest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// CardKit, as Feishu documents it (https://open.feishu.cn/document/cardkit-v1/streaming-updates-openapi-overview,
// https://open.larkoffice.com/document/cardkit-v1/card-element/content):
//
//   - POST /open-apis/cardkit/v1/cards {type: "card_json", data: <card JSON 2.0 as a string>} creates a
//     card entity and answers its card_id. Only schema "2.0" is accepted; an entity is sent once, by a
//     message whose content is {"type":"card","data":{"card_id":...}}.
//   - PUT /open-apis/cardkit/v1/cards/:card_id/elements/:element_id/content {content, sequence} pushes the
//     element's whole text (the typewriter effect when the old text is a prefix); the card must be in
//     streaming mode (config.streaming_mode true).
//   - PATCH /open-apis/cardkit/v1/cards/:card_id/settings {settings: <JSON string>, sequence} changes the
//     card's config, e.g. {"config":{"streaming_mode":false}} to end streaming.
//   - sequence must increase strictly across the calls on one card; at most 10 calls per second on one
//     card entity; the permission is cardkit:card:write.
//
// The fake answers a sequence that does not increase with CodeCardSequence, an update of a card not in
// streaming mode with CodeCardNotStreaming (the numbers are the fake's; the conditions are Feishu's), and
// more than 10 calls in a second on one card with 429. WithoutCardKit makes card creation fail with
// CodeNoPermission, as an app without cardkit:card:write would see.
const (
	CodeCardSequence     = 300317
	CodeCardNotStreaming = 300309
	CodeNoPermission     = 99991672
	cardOpsPerSecond     = 10
)

// Card is a card entity as the fake keeps it.
type Card struct {
	ID        string
	JSON      json.RawMessage   // as created
	Streaming bool              // config.streaming_mode
	Elements  map[string]string // element_id → text pushed last
	Sequence  int
	Ops       []time.Time // every content and settings call, when it was taken
}

// WithoutCardKit makes POST /cardkit/v1/cards fail (the app lacks cardkit:card:write).
func WithoutCardKit() Option { return func(s *Server) { s.noCardKit = true } }

// Card returns the card entity id.
func (s *Server) Card(id string) (Card, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cards[id]
	if !ok {
		return Card{}, false
	}
	cp := *c
	cp.Elements = map[string]string{}
	for k, v := range c.Elements {
		cp.Elements[k] = v
	}
	cp.Ops = append([]time.Time(nil), c.Ops...)
	return cp, true
}

func (s *Server) cardkitRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /open-apis/cardkit/v1/cards", s.route("cardkit:create", s.authed(s.handleCardCreate)))
	mux.HandleFunc("PUT /open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content",
		s.route("cardkit:content", s.authed(s.handleCardContent)))
	mux.HandleFunc("PATCH /open-apis/cardkit/v1/cards/{card_id}/settings", s.route("cardkit:settings", s.authed(s.handleCardSettings)))
}

// cardDoc is the part of a card JSON the fake reads.
type cardDoc struct {
	Schema string `json:"schema"`
	Config struct {
		StreamingMode bool `json:"streaming_mode"`
	} `json:"config"`
	Body struct {
		Elements []json.RawMessage `json:"elements"`
	} `json:"body"`
}

func (s *Server) handleCardCreate(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}
	var doc cardDoc
	switch {
	case s.noCardKit:
		apiError(w, http.StatusBadRequest, CodeNoPermission, "Access denied. One of the following scopes is required: [cardkit:card:write]")
		return
	case json.NewDecoder(r.Body).Decode(&b) != nil || b.Type != "card_json":
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: type must be card_json")
		return
	case json.Unmarshal([]byte(b.Data), &doc) != nil || doc.Schema != "2.0":
		apiError(w, http.StatusBadRequest, CodeInvalidParam, `card data must be card JSON 2.0 ("schema": "2.0")`)
		return
	case CheckCard([]byte(b.Data)) != nil:
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "invalid card: "+CheckCard([]byte(b.Data)).Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	c := &Card{ID: fmt.Sprintf("7355fake%06d", s.seq), JSON: json.RawMessage(b.Data), Streaming: doc.Config.StreamingMode,
		Elements: map[string]string{}}
	s.cards[c.ID] = c
	s.notifyLocked()
	writeOK(w, map[string]string{"card_id": c.ID})
}

// cardOpLocked checks a content or settings call on card id (its sequence and the per-card rate) and
// records it; false: it answered the error. s.mu must be held.
func (s *Server) cardOpLocked(w http.ResponseWriter, id string, seq int, needStreaming bool) (*Card, bool) {
	c, ok := s.cards[id]
	now := s.clock.Now()
	recent := 0
	if ok {
		for _, t := range c.Ops {
			if now.Sub(t) < rateWindow {
				recent++
			}
		}
	}
	switch {
	case !ok:
		apiError(w, http.StatusBadRequest, CodeInvalidParam, "card not found")
	case seq <= c.Sequence:
		apiError(w, http.StatusBadRequest, CodeCardSequence, fmt.Sprintf("sequence %d is not greater than %d", seq, c.Sequence))
	case needStreaming && !c.Streaming:
		apiError(w, http.StatusBadRequest, CodeCardNotStreaming, "the card is not in streaming mode")
	case recent >= cardOpsPerSecond:
		s.rateLimited++
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"code": CodeRateLimited, "msg": "card entity operated too frequently"}, nil)
	default:
		c.Sequence = seq
		c.Ops = append(c.Ops, now)
		s.notifyLocked()
		return c, true
	}
	return nil, false
}

func (s *Server) handleCardContent(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Content  *string `json:"content"`
		Sequence int     `json:"sequence"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Content == nil {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: content is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cardOpLocked(w, r.PathValue("card_id"), b.Sequence, true); ok {
		c.Elements[r.PathValue("element_id")] = *b.Content
		writeOK(w, struct{}{})
	}
}

func (s *Server) handleCardSettings(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Settings string `json:"settings"`
		Sequence int    `json:"sequence"`
	}
	var set cardDoc
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || json.Unmarshal([]byte(b.Settings), &set) != nil {
		apiError(w, http.StatusBadRequest, CodeFieldValidation, "field validation failed: settings must be a JSON string")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cardOpLocked(w, r.PathValue("card_id"), b.Sequence, false); ok {
		c.Streaming = set.Config.StreamingMode
		writeOK(w, struct{}{})
	}
}
