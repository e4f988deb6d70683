package feishutest

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers Feishu signs HTTP callbacks with.
const (
	HeaderTimestamp = "X-Lark-Request-Timestamp"
	HeaderNonce     = "X-Lark-Request-Nonce"
	HeaderSignature = "X-Lark-Signature"
)

type envelope struct {
	Schema string `json:"schema"`
	Header header `json:"header"`
	Event  any    `json:"event"`
}

type header struct {
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	CreateTime string `json:"create_time"`
	Token      string `json:"token"`
	AppID      string `json:"app_id"`
	TenantKey  string `json:"tenant_key"`
}

// userID is a user's IDs as events carry them. The fake knows users by
// open_id; their union_id and user_id are made from it.
type userID struct {
	UnionID string `json:"union_id"`
	UserID  string `json:"user_id"`
	OpenID  string `json:"open_id"`
}

func idsOf(openID string) userID {
	rest := strings.TrimPrefix(openID, "ou_")
	return userID{UnionID: "on_" + rest, UserID: "u_" + rest, OpenID: openID}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return hex.EncodeToString(b)
}

func ms(t time.Time) string {
	if t.IsZero() {
		t = time.Now()
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func orRandom(v, prefix string) string {
	if v == "" {
		return prefix + randomHex(8)
	}
	return v
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("feishutest: encode event: %v", err))
	}
	return b
}

// Mention is one @-mention in a received message.
type Mention struct {
	Key    string // "@_user_1", as it appears in the text
	OpenID string
	Name   string
	// MentionedType is "user" or "bot"; "" leaves mentioned_type out (the
	// fake's events do not know which open_id is the app's bot).
	MentionedType string
}

// MessageEvent describes an im.message.receive_v1 event (schema 2.0).
// Empty fields get defaults: random event and message IDs, now as create time,
// chat_type "group", message_type "text".
type MessageEvent struct {
	EventID      string // header.event_id; Feishu re-pushes keep it
	Token        string // header.token: the app's verification token
	AppID        string
	TenantKey    string
	CreateTime   time.Time
	SenderOpenID string
	MessageID    string
	RootID       string
	ParentID     string
	ChatID       string
	ThreadID     string
	ChatType     string // "group" or "p2p"
	MessageType  string // "text" unless Content is set
	Text         string // text of a text message, e.g. "@_user_1 hi"
	Content      string // raw content JSON string; overrides Text
	Mentions     []Mention
}

// JSON encodes the event as Feishu delivers it.
func (e MessageEvent) JSON() []byte {
	type mention struct {
		Key           string `json:"key"`
		ID            userID `json:"id"`
		MentionedType string `json:"mentioned_type,omitempty"`
		Name          string `json:"name"`
		TenantKey     string `json:"tenant_key"`
	}
	type message struct {
		MessageID   string    `json:"message_id"`
		RootID      string    `json:"root_id,omitempty"`
		ParentID    string    `json:"parent_id,omitempty"`
		CreateTime  string    `json:"create_time"`
		UpdateTime  string    `json:"update_time"`
		ChatID      string    `json:"chat_id"`
		ThreadID    string    `json:"thread_id,omitempty"`
		ChatType    string    `json:"chat_type"`
		MessageType string    `json:"message_type"`
		Content     string    `json:"content"`
		Mentions    []mention `json:"mentions,omitempty"`
		UserAgent   string    `json:"user_agent"`
	}
	type sender struct {
		SenderID   userID `json:"sender_id"`
		SenderType string `json:"sender_type"`
		TenantKey  string `json:"tenant_key"`
	}
	created := ms(e.CreateTime)
	content, msgType := e.Content, or(e.MessageType, "text")
	if content == "" {
		content, msgType = string(mustJSON(map[string]string{"text": e.Text})), "text"
	}
	msg := message{
		MessageID: orRandom(e.MessageID, "om_"), RootID: e.RootID, ParentID: e.ParentID,
		CreateTime: created, UpdateTime: created, ChatID: e.ChatID, ThreadID: e.ThreadID,
		ChatType: or(e.ChatType, "group"), MessageType: msgType, Content: content, UserAgent: "feishutest",
	}
	for _, m := range e.Mentions {
		msg.Mentions = append(msg.Mentions, mention{Key: m.Key, ID: idsOf(m.OpenID), MentionedType: m.MentionedType,
			Name: m.Name, TenantKey: e.TenantKey})
	}
	return mustJSON(envelope{
		Schema: "2.0",
		Header: header{
			EventID: orRandom(e.EventID, "ev_"), EventType: "im.message.receive_v1", CreateTime: created,
			Token: e.Token, AppID: e.AppID, TenantKey: e.TenantKey,
		},
		Event: map[string]any{
			"sender":  sender{SenderID: idsOf(e.SenderOpenID), SenderType: "user", TenantKey: e.TenantKey},
			"message": msg,
		},
	})
}

// CardAction describes a card.action.trigger callback (new card callback,
// schema 2.0). Empty fields get defaults: random event ID and callback token,
// now as create time, tag "button", host "im_message".
type CardAction struct {
	EventID        string
	Token          string // header.token: the app's verification token
	AppID          string
	TenantKey      string
	CreateTime     time.Time
	OperatorOpenID string
	CallbackToken  string         // event.token, for delayed card updates
	Tag            string         // component tag
	Name           string         // component name
	Value          map[string]any // behaviors[].value of the clicked button; the SDK needs an object
	MessageID      string         // context.open_message_id
	ChatID         string         // context.open_chat_id
	Host           string
}

// JSON encodes the callback as Feishu delivers it. It panics if Value cannot be
// encoded, which is a bug in the calling test.
func (a CardAction) JSON() []byte {
	type action struct {
		Tag   string         `json:"tag"`
		Name  string         `json:"name,omitempty"`
		Value map[string]any `json:"value"`
	}
	type cardContext struct {
		OpenMessageID string `json:"open_message_id"`
		OpenChatID    string `json:"open_chat_id"`
	}
	type operator struct {
		TenantKey string `json:"tenant_key"`
		OpenID    string `json:"open_id"`
	}
	type event struct {
		Operator operator    `json:"operator"`
		Token    string      `json:"token"`
		Action   action      `json:"action"`
		Host     string      `json:"host"`
		Context  cardContext `json:"context"`
	}
	return mustJSON(envelope{
		Schema: "2.0",
		Header: header{
			EventID: orRandom(a.EventID, "ev_"), EventType: "card.action.trigger", CreateTime: ms(a.CreateTime),
			Token: a.Token, AppID: a.AppID, TenantKey: a.TenantKey,
		},
		Event: event{
			Operator: operator{TenantKey: a.TenantKey, OpenID: a.OperatorOpenID},
			Token:    orRandom(a.CallbackToken, "c-"),
			Action:   action{Tag: or(a.Tag, "button"), Name: a.Name, Value: a.Value},
			Host:     or(a.Host, "im_message"),
			Context:  cardContext{OpenMessageID: a.MessageID, OpenChatID: a.ChatID},
		},
	})
}

// Encrypt seals plaintext as Feishu does with an Encrypt Key and returns the
// request body {"encrypt":"<base64>"}: AES-256-CBC with key sha256(encryptKey),
// PKCS#7 padding and a random IV prefixed to the ciphertext.
func Encrypt(encryptKey string, plaintext []byte) (string, error) {
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return "", fmt.Errorf("feishutest: encrypt: %w", err)
	}
	pad := aes.BlockSize - len(plaintext)%aes.BlockSize
	buf := make([]byte, aes.BlockSize, aes.BlockSize+len(plaintext)+pad)
	_, _ = rand.Read(buf) // the IV; never fails since Go 1.24
	buf = append(buf, plaintext...)
	buf = append(buf, bytes.Repeat([]byte{byte(pad)}, pad)...)
	cipher.NewCBCEncrypter(block, buf[:aes.BlockSize]).CryptBlocks(buf[aes.BlockSize:], buf[aes.BlockSize:])
	body, err := json.Marshal(map[string]string{"encrypt": base64.StdEncoding.EncodeToString(buf)})
	if err != nil {
		return "", fmt.Errorf("feishutest: encrypt: %w", err)
	}
	return string(body), nil
}

// Sign computes X-Lark-Signature: hex(sha256(timestamp + nonce + encryptKey + body)).
func Sign(timestamp, nonce, encryptKey string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(timestamp + nonce + encryptKey))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// SignedRequest builds the POST Feishu sends to a callback URL: body as is
// (encrypt it first with Encrypt), signed at time at with a random nonce.
func SignedRequest(ctx context.Context, url, encryptKey string, body []byte, at time.Time) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("feishutest: signed request: %w", err)
	}
	ts, nonce := strconv.FormatInt(at.Unix(), 10), randomHex(8)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderNonce, nonce)
	req.Header.Set(HeaderSignature, Sign(ts, nonce, encryptKey, body))
	return req, nil
}
