package feishutest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"
)

// Frame types of the long connection's data frames (header "type").
const (
	FrameEvent = string(larkws.MessageTypeEvent) // events and, for the Go SDK, card.action.trigger
	FrameCard  = string(larkws.MessageTypeCard)  // reported from production for card callbacks; SDK v3.12 drops it unanswered
)

// FrameResponse is a response frame a client wrote back for a pushed frame.
type FrameResponse struct {
	MessageID  string // frame header message_id
	StatusCode int    // payload "code": 200, or 500 on handler error / no handler
	Data       []byte // payload "data" decoded: the handler's JSON answer (toast/card), or nil
	BizRT      string // frame header biz_rt: handler time in ms
}

type pushedFrame struct {
	msgType string
	payload []byte
}

type wsConn struct {
	ws      *websocket.Conn
	writeMu chan struct{} // 1-slot semaphore: gorilla allows one writer
}

func (c *wsConn) write(ctx context.Context, f *larkws.Frame) error {
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	select {
	case c.writeMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.writeMu }()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultWriteTTL)
	}
	if err := c.ws.SetWriteDeadline(deadline); err != nil {
		return err
	}
	return c.ws.WriteMessage(websocket.BinaryMessage, b)
}

// handleEndpoint answers the SDK's bootstrap POST with the ws URL and ClientConfig.
func (s *Server) handleEndpoint(w http.ResponseWriter, r *http.Request) {
	var req larkws.BootstrapRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusOK, larkws.EndpointResp{Code: larkws.Forbidden, Msg: "body is not JSON"}, nil)
		return
	}
	if req.AppID != s.appID || req.AppSecret != s.appSecret {
		// A non-zero code other than 1 and 1000040343 is a ClientError: the SDK stops, no retry.
		writeJSON(w, http.StatusOK, larkws.EndpointResp{Code: larkws.Forbidden, Msg: "invalid app_id or app_secret"}, nil)
		return
	}
	s.mu.Lock()
	s.seq++
	device := "dev_fake" + strconv.Itoa(s.seq)
	s.devices[device] = true
	s.mu.Unlock()
	conf := s.clientConfig
	u := "ws" + strings.TrimPrefix(s.srv.URL, "http") + routeWS + "?" + larkws.DeviceID + "=" + device + "&" + larkws.ServiceID + "=" + strconv.Itoa(serviceID)
	writeJSON(w, http.StatusOK, larkws.EndpointResp{Code: larkws.OK, Msg: "ok", Data: &larkws.Endpoint{Url: u, ClientConfig: &conf}}, nil)
}

// handleWS upgrades a client that bootstrapped and runs its read loop.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	known := s.devices[r.URL.Query().Get(larkws.DeviceID)]
	s.mu.Unlock()
	if !known {
		w.Header().Set(larkws.HeaderHandshakeStatus, strconv.Itoa(larkws.Forbidden))
		w.Header().Set(larkws.HeaderHandshakeMsg, "unknown device_id")
		http.Error(w, "unknown device_id", http.StatusForbidden)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader already answered
	}
	c := &wsConn{ws: ws, writeMu: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.Close()
		return
	}
	s.wg.Add(1)
	s.conns = append(s.conns, c)
	s.accepted++
	s.notifyLocked()
	s.mu.Unlock()
	defer s.wg.Done()
	s.readLoop(c)
}

// readLoop answers pings and records response frames until the socket closes.
func (s *Server) readLoop(c *wsConn) {
	defer func() {
		_ = c.ws.Close()
		s.mu.Lock()
		s.removeConnLocked(c)
		s.mu.Unlock()
	}()
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var f larkws.Frame
		if f.Unmarshal(msg) != nil {
			continue
		}
		hs := larkws.Headers(f.Headers)
		switch larkws.FrameType(f.Method) {
		case larkws.FrameTypeControl:
			if hs.GetString(larkws.HeaderType) == string(larkws.MessageTypePing) {
				if s.pong(c, f.Service) != nil {
					return
				}
			}
		case larkws.FrameTypeData:
			var resp larkws.Response
			if json.Unmarshal(f.Payload, &resp) != nil {
				continue
			}
			id := hs.GetString(larkws.HeaderMessageID)
			s.mu.Lock()
			s.responses[id] = append(s.responses[id], FrameResponse{
				MessageID: id, StatusCode: resp.StatusCode, Data: resp.Data, BizRT: hs.GetString(larkws.HeaderBizRt),
			})
			s.notifyLocked()
			s.mu.Unlock()
		}
	}
}

// pong answers a ping; its payload carries the ClientConfig, which the SDK applies.
func (s *Server) pong(c *wsConn, service int32) error {
	conf, err := json.Marshal(s.clientConfig)
	if err != nil {
		return err
	}
	var hs larkws.Headers
	hs.Add(larkws.HeaderType, string(larkws.MessageTypePong))
	ctx, cancel := context.WithTimeout(context.Background(), defaultWriteTTL)
	defer cancel()
	return c.write(ctx, &larkws.Frame{Method: int32(larkws.FrameTypeControl), Service: service, Headers: hs, Payload: conf})
}

// removeConnLocked forgets c. s.mu must be held.
func (s *Server) removeConnLocked(c *wsConn) {
	for i, x := range s.conns {
		if x == c {
			s.conns = append(s.conns[:i:i], s.conns[i+1:]...)
			s.notifyLocked()
			return
		}
	}
}

// Connections counts the long-connection clients connected now.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Accepted counts the long connections accepted so far, reconnects included.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// DisconnectClients closes every long connection from the server side, as a
// gateway restart would; SDK clients with auto-reconnect come back.
func (s *Server) DisconnectClients() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.notifyLocked()
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.ws.Close()
	}
}

// Responses returns the response frames clients wrote for the pushed frame messageID.
func (s *Server) Responses(messageID string) []FrameResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]FrameResponse(nil), s.responses[messageID]...)
}

// PushFrame sends payload as one data frame of type msgType (FrameEvent,
// FrameCard) to one connected client, chosen round-robin as Feishu's cluster
// mode delivers to one client only. It waits for a client to connect, and
// returns the frame's message_id once written, without waiting for the answer.
func (s *Server) PushFrame(ctx context.Context, msgType string, payload []byte) (string, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return "", fmt.Errorf("feishutest: push %s frame: %w", msgType, ErrClosed)
		}
		if len(s.conns) > 0 {
			break // still locked
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("feishutest: push %s frame: no client connected: %w", msgType, ctx.Err())
		}
	}
	c := s.conns[s.next%len(s.conns)]
	s.next++
	s.seq++
	seq := s.seq
	id := "msg_fake" + strconv.Itoa(seq)
	s.pushed[id] = pushedFrame{msgType: msgType, payload: payload}
	s.mu.Unlock()

	var hs larkws.Headers
	hs.Add(larkws.HeaderType, msgType)
	hs.Add(larkws.HeaderMessageID, id)
	hs.Add(larkws.HeaderSum, "1")
	hs.Add(larkws.HeaderSeq, "0")
	hs.Add(larkws.HeaderTraceID, "trace_fake"+strconv.Itoa(seq))
	hs.Add(larkws.HeaderTimestamp, strconv.FormatInt(s.clock.Now().UnixMilli(), 10))
	f := &larkws.Frame{
		SeqID: uint64(seq), LogID: uint64(seq), Service: serviceID,
		Method: int32(larkws.FrameTypeData), Headers: hs, Payload: payload,
	}
	if err := c.write(ctx, f); err != nil {
		return id, fmt.Errorf("feishutest: push %s frame %s: %w", msgType, id, err)
	}
	return id, nil
}

// PushEvent pushes a v2 event (e.g. MessageEvent.JSON()) as an "event" frame
// and returns the frame's message_id; see PushFrame.
func (s *Server) PushEvent(ctx context.Context, eventJSON []byte) (string, error) {
	return s.PushFrame(ctx, FrameEvent, eventJSON)
}

// PushCardAction pushes a card.action.trigger callback (e.g. CardAction.JSON())
// and returns the handler's answer from the client's response frame. The frame
// type is "event": the Go SDK v3.12 answers nothing on "card" frames. An answer
// with a status other than 200 is returned as an error along with its data.
func (s *Server) PushCardAction(ctx context.Context, actionJSON []byte) ([]byte, error) {
	id, err := s.PushFrame(ctx, FrameEvent, actionJSON)
	if err != nil {
		return nil, fmt.Errorf("feishutest: push card action: %w", err)
	}
	if err := s.WaitFor(ctx, func() bool { return len(s.Responses(id)) > 0 }); err != nil {
		return nil, fmt.Errorf("feishutest: card action %s: awaiting response: %w", id, err)
	}
	r := s.Responses(id)[0]
	if r.StatusCode != http.StatusOK {
		return r.Data, fmt.Errorf("feishutest: card action %s: client answered %d", id, r.StatusCode)
	}
	return r.Data, nil
}

// Redeliver pushes the frame messageID again with the same payload (so the same
// header.event_id) under a new frame message_id, as Feishu re-pushes an event
// that was not acknowledged in time. It returns the new message_id.
func (s *Server) Redeliver(ctx context.Context, messageID string) (string, error) {
	s.mu.Lock()
	p, ok := s.pushed[messageID]
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("feishutest: redeliver %s: %w", messageID, ErrUnknownFrame)
	}
	return s.PushFrame(ctx, p.msgType, p.payload)
}
