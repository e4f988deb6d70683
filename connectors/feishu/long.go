package feishu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/internal/longtext"
)

// A text message is sent as longtext plans it for Feishu's text messages (content of at most 150 KB:
// textBudget): one message, up to longtext.MaxParts parts, or the whole text uploaded as a Markdown
// file (im/v1/files, file_type stream) sent as a file message, followed by a text that says so. Each
// send carries its own uuid (longtext.Key: the last the message's own key), so Feishu drops the sends
// of a retry that went out already (for an hour); a retry uploads the file again, and the upload it
// does not send stays unseen.

const (
	// textBudget bounds the bytes of a text message's content, under Feishu's 150 KB.
	textBudget = 140 << 10
	// maxText bounds a notice (the answer to a command: pool.go), in runes.
	maxText = 30000
	// fileType is the im/v1/files type of a Markdown file (any file that is not a
	// document, a sheet, a slide, a PDF, audio or video).
	fileType = "stream"
)

// jsonCost is what a character costs of a text message's content: its bytes in the content's JSON
// (marshal: <, > and & unescaped; a byte that is not UTF-8 becomes \ufffd).
func jsonCost(r rune) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == 0x2028 || r == 0x2029 || r == utf8.RuneError:
		return 6
	}
	return utf8.RuneLen(r)
}

// textContent is the content of a text message of s.
func textContent(s string) (string, error) {
	b, err := marshal(map[string]string{"text": s})
	if err != nil {
		return "", fmt.Errorf("feishu: render text: %w", err)
	}
	return string(b), nil
}

// sendFunc sends one message (a reply in a topic, a direct message) and returns its ID.
type sendFunc func(msgType, content, key string) (string, error)

// sendText sends the text message m through send as longtext plans it, and returns the ID of the
// last message sent.
func (c *Connector) sendText(ctx context.Context, m chat.Message, send sendFunc) (string, error) {
	p := longtext.Split(m.Text, textBudget-len(`{"text":""}`), jsonCost, m.Request, m.IdempotencyKey)
	n, i := len(p.Parts), 0
	var id string
	if p.File != nil {
		n++
		fileKey, err := c.upload(ctx, p.File)
		if err != nil {
			return "", err
		}
		content, err := marshal(map[string]string{"file_key": fileKey})
		if err != nil {
			return "", fmt.Errorf("feishu: render file message: %w", err)
		}
		if id, err = send(larkim.MsgTypeFile, string(content), longtext.Key(m.IdempotencyKey, 0, n)); err != nil {
			return "", err
		}
		i++
	}
	for _, part := range p.Parts {
		content, err := textContent(part)
		if err != nil {
			return "", err
		}
		if id, err = send(larkim.MsgTypeText, content, longtext.Key(m.IdempotencyKey, i, n)); err != nil {
			return "", err
		}
		i++
	}
	return id, nil
}

// upload uploads f (im/v1/files) and returns its file_key.
func (c *Connector) upload(ctx context.Context, f *longtext.File) (string, error) {
	if err := c.perAPI.Wait(ctx, "files"); err != nil {
		return "", err
	}
	resp, err := c.cli.Im.V1.File.Create(ctx, larkim.NewCreateFileReqBuilder().Body(larkim.NewCreateFileReqBodyBuilder().
		FileType(fileType).FileName(f.Name).File(strings.NewReader(f.Content)).Build()).Build())
	if resp == nil {
		return "", c.apiError("upload file", nil, larkcore.CodeError{}, err)
	}
	if err := c.apiError("upload file", resp.ApiResp, resp.CodeError, err); err != nil {
		return "", err
	}
	if resp.Data == nil || resp.Data.FileKey == nil {
		return "", errors.New("feishu: upload file: answer without file_key")
	}
	return *resp.Data.FileKey, nil
}

// FitsLive implements chat.LiveBound: a live card's answer element holds at most maxCardText runes
// of a card of at most cardBudget bytes.
func (c *Connector) FitsLive(text string) bool {
	if utf8.RuneCountInString(text) > maxCardText {
		return false
	}
	b, err := marshal(text)
	return err == nil && len(b) <= cardBudget/2
}

var _ chat.LiveBound = (*Connector)(nil)

// noticeContent is the content of a notice of text, clipped to maxText runes.
func noticeContent(text string) (string, error) {
	return textContent(clip.Text(text, maxText, clip.Runes))
}
