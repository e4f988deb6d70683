package threads

import (
	"fmt"

	"github.com/roombridge/roombridge/internal/jsonx"
)

// encode is e's JSON payload, exactly as json.Marshal writes it (the
// fields in order, with their tags; TestEffectEncodeIsMarshal holds it to
// that), without reflection but for a card's: every expiry and every
// reply prepares effects.
func (e *Effect) encode() ([]byte, error) {
	m := &e.Message
	o := jsonx.NewObject(192 + len(e.Request) + len(e.Surface) + len(e.Channel) + len(e.User) + len(e.Ref) +
		len(e.Save) + len(e.Expand) + len(m.Request) + len(m.Kind) + len(m.Text) + len(m.IdempotencyKey) + len(m.Recipient))
	o.String("op", string(e.Op), false)
	o.String("request", e.Request, false)
	o.String("surface", e.Surface, false)
	o.String("channel", e.Channel, true)
	o.String("user", e.User, true)
	o.String("ref", e.Ref, true)
	o.String("save", e.Save, true)
	o.String("expand", e.Expand, true)
	msg := jsonx.NewObject(96 + len(m.Request) + len(m.Kind) + len(m.Text) + len(m.IdempotencyKey) + len(m.Recipient))
	msg.String("request", m.Request, false)
	msg.String("kind", m.Kind, false)
	msg.String("text", m.Text, true)
	if m.Card != nil {
		msg.Value("card", m.Card)
	}
	msg.Bool("broadcast", m.Broadcast, true)
	msg.String("idempotency_key", m.IdempotencyKey, true)
	msg.String("recipient", m.Recipient, true)
	b, err := msg.Bytes()
	if err != nil {
		return nil, fmt.Errorf("threads: encode: %w", err)
	}
	o.Raw("message", b)
	return o.Bytes()
}
