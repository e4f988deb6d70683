package slacktest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// socketWriteTimeout bounds a frame write so a stuck client cannot wedge a test.
const socketWriteTimeout = 5 * time.Second

// Envelope is one Socket Mode delivery and what the client acked for it.
type Envelope struct {
	ID           string
	Type         string // "events_api" or "interactive"; "" for an ack of an unknown envelope_id
	Payload      json.RawMessage
	RetryAttempt int
	RetryReason  string
	SentAt       time.Time // server clock at the last write attempt; zero if no connection ever took it
	Acks         int       // number of acks received (more than 1 is a client bug)
	AckedAt      time.Time // server clock at the first ack
	AckPayload   json.RawMessage
}

// Latency is the time from delivery to the first ack, on the server clock; 0 if not acked.
func (e Envelope) Latency() time.Duration {
	if e.Acks == 0 {
		return 0
	}
	return e.AckedAt.Sub(e.SentAt)
}

type wsConn struct {
	ws  *websocket.Conn
	wmu sync.Mutex // gorilla allows one concurrent writer of data frames
}

func (c *wsConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(socketWriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// socketState is the part of Server guarded by Server.mu that belongs to Socket Mode.
type socketState struct {
	conns     []*wsConn // live connections, oldest first
	connects  int
	tickets   map[string]bool
	ticketSeq int
	envSeq    int
	envelopes map[string]*Envelope
	envOrder  []string
}

func (s *Server) initSocket() {
	s.tickets, s.envelopes = map[string]bool{}, map[string]*Envelope{}
}

// issueTicketLocked returns a single-use WebSocket URL, as apps.connections.open does.
func (s *Server) issueTicketLocked() string {
	s.ticketSeq++
	t := strconv.Itoa(s.ticketSeq)
	s.tickets[t] = true
	return "ws" + strings.TrimPrefix(s.http.URL, "http") + "/link/?ticket=" + t
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	t := r.URL.Query().Get("ticket")
	if s.closed || !s.tickets[t] {
		s.mu.Unlock()
		http.Error(w, "invalid or used ticket", http.StatusUnauthorized)
		return
	}
	delete(s.tickets, t)
	s.wg.Add(1)
	n := len(s.conns) + 1
	s.mu.Unlock()
	defer s.wg.Done()

	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade already answered the client
	}
	c := &wsConn{ws: ws}
	hello := fmt.Sprintf(`{"type":"hello","num_connections":%d,"debug_info":{"host":"slacktest","build_number":1,`+
		`"approximate_connection_time":18060},"connection_info":{"app_id":%q}}`, n, AppID)
	if err := c.write([]byte(hello)); err != nil {
		_ = ws.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.Close()
		return
	}
	s.conns = append(s.conns, c)
	s.connects++
	s.notifyLocked()
	s.mu.Unlock()

	stop, pinged := make(chan struct{}), make(chan struct{})
	go s.pingLoop(c, stop, pinged)
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			break
		}
		s.recordAck(data)
	}
	close(stop)
	<-pinged
	_ = ws.Close()
	s.dropConn(c)
}

// pingLoop sends WebSocket pings, which slack-go requires to consider the connection alive.
func (s *Server) pingLoop(c *wsConn, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if s.opts.ping <= 0 {
		return
	}
	t := time.NewTicker(s.opts.ping)
	defer t.Stop()
	for {
		if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(socketWriteTimeout)); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (s *Server) dropConn(c *wsConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.conns {
		if x == c {
			s.conns = append(s.conns[:i:i], s.conns[i+1:]...)
			s.notifyLocked()
			return
		}
	}
}

func (s *Server) recordAck(data []byte) {
	var ack struct {
		EnvelopeID string          `json:"envelope_id"`
		Payload    json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.envelopes[ack.EnvelopeID]
	if !ok {
		e = &Envelope{ID: ack.EnvelopeID}
		s.envelopes[e.ID] = e
		s.envOrder = append(s.envOrder, e.ID)
	}
	if e.Acks == 0 {
		e.AckedAt, e.AckPayload = s.opts.now(), ack.Payload
	}
	e.Acks++
	s.notifyLocked()
}

// Connections reports the number of live Socket Mode connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Connects reports how many Socket Mode connections were ever accepted (reconnects included).
func (s *Server) Connects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

// Disconnect sends a Socket Mode "disconnect" envelope (reason e.g. "refresh_requested") to every live
// connection; slack-go then reconnects through apps.connections.open.
func (s *Server) Disconnect(reason string) error {
	s.mu.Lock()
	conns := append([]*wsConn(nil), s.conns...)
	s.mu.Unlock()
	msg, _ := json.Marshal(map[string]any{"type": "disconnect", "reason": reason,
		"debug_info": map[string]any{"host": "slacktest"}})
	for _, c := range conns {
		if err := c.write(msg); err != nil {
			return fmt.Errorf("slacktest: disconnect: %w", err)
		}
	}
	return nil
}

// PushEventsAPI delivers an events_api envelope whose payload is eventJSON (an event_callback, e.g. from
// AppMentionEvent) and returns its envelope ID. It waits for a connection until ctx ends.
func (s *Server) PushEventsAPI(ctx context.Context, eventJSON []byte) (string, error) {
	return s.push(ctx, "events_api", eventJSON, 0, "")
}

// PushInteractive delivers an interactive envelope (e.g. BlockActionsPayload) and returns its envelope ID.
func (s *Server) PushInteractive(ctx context.Context, payloadJSON []byte) (string, error) {
	return s.push(ctx, "interactive", payloadJSON, 0, "")
}

// Redeliver sends envelopeID's payload again as Slack does after a missed ack: a new envelope ID,
// retry_attempt one higher and retry_reason "timeout". It returns the new envelope ID.
func (s *Server) Redeliver(ctx context.Context, envelopeID string) (string, error) {
	s.mu.Lock()
	e, ok := s.envelopes[envelopeID]
	s.mu.Unlock()
	if !ok || e.Type == "" {
		return "", fmt.Errorf("slacktest: redeliver %s: unknown envelope", envelopeID)
	}
	return s.push(ctx, e.Type, e.Payload, e.RetryAttempt+1, "timeout")
}

// push records the envelope, then writes it to the newest live connection, waiting for one (and
// moving on from connections whose write fails) until ctx ends.
func (s *Server) push(ctx context.Context, typ string, payload []byte, attempt int, reason string) (string, error) {
	if !json.Valid(payload) {
		return "", fmt.Errorf("slacktest: push %s: payload is not JSON", typ)
	}
	s.mu.Lock()
	s.envSeq++
	e := &Envelope{ID: fmt.Sprintf("envelope-%d", s.envSeq), Type: typ, Payload: append([]byte(nil), payload...),
		RetryAttempt: attempt, RetryReason: reason}
	s.envelopes[e.ID] = e
	s.envOrder = append(s.envOrder, e.ID)
	s.mu.Unlock()
	frame, err := json.Marshal(map[string]any{"type": typ, "envelope_id": e.ID, "payload": e.Payload,
		"accepts_response_payload": false, "retry_attempt": attempt, "retry_reason": reason})
	if err != nil {
		return "", fmt.Errorf("slacktest: push %s: %w", typ, err)
	}
	if err := s.deliver(ctx, typ, e, frame); err != nil {
		return "", err
	}
	return e.ID, nil
}

// PushFrame writes frame, a Socket Mode frame as Slack sends it (a recorded
// one, say), unchanged to the newest live connection, waiting for one until
// ctx ends. A frame with an envelope_id is recorded as a delivery under that
// ID (Envelopes, WaitAck; an ID already used is refused) and the ID is
// returned; a frame without one (hello, disconnect) returns "".
func (s *Server) PushFrame(ctx context.Context, frame []byte) (string, error) {
	var f struct {
		Type         string          `json:"type"`
		EnvelopeID   string          `json:"envelope_id"`
		Payload      json.RawMessage `json:"payload"`
		RetryAttempt int             `json:"retry_attempt"`
		RetryReason  string          `json:"retry_reason"`
	}
	if err := json.Unmarshal(frame, &f); err != nil {
		return "", fmt.Errorf("slacktest: push frame: %w", err)
	}
	e := &Envelope{ID: f.EnvelopeID, Type: f.Type, Payload: f.Payload, RetryAttempt: f.RetryAttempt, RetryReason: f.RetryReason}
	if e.ID != "" {
		s.mu.Lock()
		_, dup := s.envelopes[e.ID]
		if !dup {
			s.envelopes[e.ID] = e
			s.envOrder = append(s.envOrder, e.ID)
		}
		s.mu.Unlock()
		if dup {
			return "", fmt.Errorf("slacktest: push frame: envelope %s was already delivered", e.ID)
		}
	}
	if err := s.deliver(ctx, f.Type, e, frame); err != nil {
		return "", err
	}
	return e.ID, nil
}

// deliver writes frame, the frame of e, to the newest live connection,
// waiting for one (and moving on from connections whose write fails) until
// ctx ends.
func (s *Server) deliver(ctx context.Context, typ string, e *Envelope, frame []byte) error {
	for {
		var c *wsConn
		err := s.WaitFor(ctx, func(s *Server) bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			if n := len(s.conns); n > 0 {
				c = s.conns[n-1]
			}
			return c != nil || s.closed
		})
		if err != nil {
			return fmt.Errorf("slacktest: push %s: no connection: %w", typ, err)
		}
		if c == nil {
			return fmt.Errorf("slacktest: push %s: %w", typ, ErrClosed)
		}
		s.mu.Lock()
		e.SentAt = s.opts.now()
		s.mu.Unlock()
		if err := c.write(frame); err == nil {
			return nil
		}
		_ = c.ws.Close()
		s.dropConn(c)
	}
}

// Envelopes returns a snapshot of every delivery in push order (and acks of unknown IDs).
func (s *Server) Envelopes() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Envelope, 0, len(s.envOrder))
	for _, id := range s.envOrder {
		out = append(out, *s.envelopes[id])
	}
	return out
}

// Acked reports whether the client acked envelopeID.
func (s *Server) Acked(envelopeID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.envelopes[envelopeID]
	return ok && e.Acks > 0
}

// WaitAck waits until envelopeID is acked and returns the ack's payload (nil if it had none).
func (s *Server) WaitAck(ctx context.Context, envelopeID string) (json.RawMessage, error) {
	if err := s.WaitFor(ctx, func(s *Server) bool { return s.Acked(envelopeID) }); err != nil {
		return nil, fmt.Errorf("slacktest: wait ack %s: %w", envelopeID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.envelopes[envelopeID].AckPayload, nil
}
