package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkcardkit "github.com/larksuite/oapi-sdk-go/v3/service/cardkit/v1"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/ratelimit"
	"github.com/roombridge/roombridge/internal/clip"
)

// Live messages (chat.Streamer) are CardKit streaming cards
// (https://open.feishu.cn/document/cardkit-v1/streaming-updates-openapi-overview): a card entity
// created with streaming_mode on (POST cardkit/v1/cards), sent as a reply in the topic; the answer's
// whole text pushed to its text element (PUT …/elements/answer/content) and the tool timeline to
// another, each call with a strictly increasing sequence and at most 5 calls a second on one card
// (Feishu allows 10); streaming mode closed at the end (PATCH …/settings), or the preview keeps
// saying it is generating. The permission is cardkit:card:write; without it (or on any error of the
// card's creation but a rate limit) the live message is an ordinary card reply updated by PATCH,
// within the per-message spacing.
//
// A live card's reference is "<message_id>/<card_id>" (a fallback card's is its message ID): the
// card entity is what is updated, the message is what a restart finds.

// LivePace keeps the calls on one card entity at most 5 a second.
const LivePace = 200 * time.Millisecond

// Element IDs of a live card.
const (
	elemAnswer = "answer"
	elemTools  = "tools"
)

// restartSequence is the first sequence used on a card this process did not
// create (after a restart): above any count one process reaches in a card's
// 14 days at 5 calls a second, and growing with time so that a repeat after
// another restart is above it too.
func restartSequence(now time.Time) int {
	return 1<<30 + int(now.Unix()-time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
}

var _ chat.Streamer = (*Connector)(nil)

// liveCards is what the connector knows of its live cards.
type liveCards struct {
	mu    sync.Mutex
	seq   map[string]int      // card ID → last sequence used
	tools map[string][]string // card ID → the timeline's lines
	space *ratelimit.Spacer   // calls on one card, key card ID
}

func newLiveCards() *liveCards {
	return &liveCards{seq: map[string]int{}, tools: map[string][]string{}, space: ratelimit.NewSpacer(LivePace)}
}

// next returns card's next sequence.
func (l *liveCards) next(card string, now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.seq[card]
	if !ok {
		n = restartSequence(now)
	}
	l.seq[card] = n + 1
	return n + 1
}

// StreamPace implements chat.Streamer.
func (c *Connector) StreamPace() time.Duration { return LivePace }

// OpenStream implements chat.Streamer: a streaming card entity replied in the topic of t, or, where
// CardKit is refused, a plain card reply.
func (c *Connector) OpenStream(ctx context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	card, err := c.createLiveCard(ctx)
	var ra *chat.RetryAfterError
	switch {
	case errors.As(err, &ra) || ctx.Err() != nil:
		return chat.MessageRef{}, err
	case err != nil:
		c.log.InfoContext(ctx, "CardKit refused; the live message is a card updated by PATCH", "request_id", m.Request, "error", err)
		return c.Reply(ctx, t, chat.Message{Request: m.Request, Kind: "live", Card: &chat.Card{Text: "…"}})
	}
	content, _ := json.Marshal(map[string]any{"type": "card", "data": map[string]string{"card_id": card}})
	id, err := c.reply(ctx, t.Channel, t.ID, larkim.MsgTypeInteractive, string(content), "", true)
	if err != nil {
		return chat.MessageRef{}, err
	}
	c.live.mu.Lock()
	c.live.seq[card] = 0
	c.live.mu.Unlock()
	return chat.MessageRef{Surface: chat.Feishu, Channel: t.Channel, ID: id + "/" + card}, nil
}

// createLiveCard creates the card entity of a live message: JSON 2.0, streaming mode on, a plain_text
// element for the tools and one for the answer.
func (c *Connector) createLiveCard(ctx context.Context) (string, error) {
	doc := map[string]any{
		"schema": "2.0",
		"config": map[string]any{"update_multi": true, "streaming_mode": true},
		"body": map[string]any{"elements": []any{
			map[string]any{"tag": "div", "text": map[string]string{"tag": "plain_text", "element_id": elemTools, "content": ""}},
			map[string]any{"tag": "div", "text": map[string]string{"tag": "plain_text", "element_id": elemAnswer, "content": "…"}},
		}},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("feishu: render live card: %w", err)
	}
	if err := c.perAPI.Wait(ctx, "cardkit"); err != nil {
		return "", err
	}
	resp, err := c.cli.Cardkit.V1.Card.Create(ctx, larkcardkit.NewCreateCardReqBuilder().
		Body(larkcardkit.NewCreateCardReqBodyBuilder().Type("card_json").Data(string(data)).Build()).Build())
	if resp == nil {
		return "", c.apiError("cardkit create", nil, larkcore.CodeError{}, err)
	}
	if err := c.apiError("cardkit create", resp.ApiResp, resp.CodeError, err); err != nil {
		return "", err
	}
	if resp.Data == nil || resp.Data.CardId == nil {
		return "", errors.New("feishu: cardkit create: answer without card_id")
	}
	return *resp.Data.CardId, nil
}

// AppendStream implements chat.Streamer: the tool timeline (when it changed) and the answer's whole
// text, each a content call on the card; a fallback card is PATCHed.
func (c *Connector) AppendStream(ctx context.Context, ref chat.MessageRef, u chat.StreamUpdate) error {
	_, card, live := strings.Cut(ref.ID, "/")
	if !live {
		return c.Update(ctx, ref, chat.Message{Kind: "live", Card: &chat.Card{Text: u.Text}})
	}
	if len(u.Steps) > 0 {
		if err := c.content(ctx, card, elemTools, c.timeline(card, u.Steps)); err != nil {
			return err
		}
	}
	if u.Text == "" {
		return nil
	}
	return c.content(ctx, card, elemAnswer, clip.Text(u.Text, maxCardText, clip.Runes))
}

// timeline adds steps to card's tool timeline and renders it.
func (c *Connector) timeline(card string, steps []chat.ToolStep) string {
	c.live.mu.Lock()
	defer c.live.mu.Unlock()
	lines := c.live.tools[card]
	for _, s := range steps {
		line := "• " + s.Name + " …"
		if s.Status != chat.StepStarted {
			line = fmt.Sprintf("• %s: %s (%s)", s.Name, s.Status, s.Took.Round(time.Millisecond))
		}
		lines = append(lines, line)
	}
	c.live.tools[card] = lines
	return strings.Join(lines, "\n")
}

// content pushes text to element of card.
func (c *Connector) content(ctx context.Context, card, element, text string) error {
	return c.live.space.Do(ctx, card, func() error {
		if err := c.perAPI.Wait(ctx, "cardkit"); err != nil {
			return err
		}
		resp, err := c.cli.Cardkit.V1.CardElement.Content(ctx, larkcardkit.NewContentCardElementReqBuilder().
			CardId(card).ElementId(element).Body(larkcardkit.NewContentCardElementReqBodyBuilder().
			Content(text).Sequence(c.live.next(card, c.clock.Now())).Build()).Build())
		if resp == nil {
			return c.apiError("cardkit content", nil, larkcore.CodeError{}, err)
		}
		return c.apiError("cardkit content", resp.ApiResp, resp.CodeError, err)
	})
}

// CloseStream implements chat.Streamer: the answer's element gets m.Text, then streaming mode is
// closed. Repeating it (a card whose streaming is closed) PATCHes nothing: the content call is refused
// and the settings call made again; a fallback card is PATCHed.
func (c *Connector) CloseStream(ctx context.Context, ref chat.MessageRef, m chat.Message) error {
	_, card, live := strings.Cut(ref.ID, "/")
	if !live {
		return c.Update(ctx, ref, chat.Message{Request: m.Request, Kind: m.Kind, Card: &chat.Card{Text: m.Text}})
	}
	if err := c.content(ctx, card, elemAnswer, clip.Text(m.Text, maxCardText, clip.Runes)); err != nil && !errors.Is(err, chat.ErrPermanent) {
		return err
	}
	settings, _ := json.Marshal(map[string]any{"config": map[string]any{"streaming_mode": false}})
	err := c.live.space.Do(ctx, card, func() error {
		resp, err := c.cli.Cardkit.V1.Card.Settings(ctx, larkcardkit.NewSettingsCardReqBuilder().CardId(card).
			Body(larkcardkit.NewSettingsCardReqBodyBuilder().Settings(string(settings)).
				Sequence(c.live.next(card, c.clock.Now())).Build()).Build())
		if resp == nil {
			return c.apiError("cardkit settings", nil, larkcore.CodeError{}, err)
		}
		return c.apiError("cardkit settings", resp.ApiResp, resp.CodeError, err)
	})
	if err == nil {
		c.live.mu.Lock()
		delete(c.live.seq, card)
		delete(c.live.tools, card)
		c.live.mu.Unlock()
	}
	return err
}
