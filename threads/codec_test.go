package threads_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// genEffect generates effects with any value in every field, and in its
// message's and card's (all of them set when full).
func genEffect(full bool) *rapid.Generator[threads.Effect] {
	str := jsonxtest.Text(full)
	opt := jsonxtest.Optional(str, full)
	card := rapid.Custom(func(t *rapid.T) *chat.Card {
		return &chat.Card{Title: str.Draw(t, "title"), Text: opt.Draw(t, "text"), Status: opt.Draw(t, "status"), BlockID: opt.Draw(t, "block"),
			Fields: rapid.SliceOfN(rapid.Custom(func(t *rapid.T) chat.Field {
				return chat.Field{Label: str.Draw(t, "label"), Value: str.Draw(t, "value")}
			}), jsonxtest.Several(full), 2).Draw(t, "fields"),
			Buttons: rapid.SliceOfN(rapid.Custom(func(t *rapid.T) chat.Button {
				return chat.Button{ActionID: str.Draw(t, "action"), Label: str.Draw(t, "label"), Value: str.Draw(t, "value"),
					Style: opt.Draw(t, "style"), Confirm: opt.Draw(t, "confirm")}
			}), jsonxtest.Several(full), 2).Draw(t, "buttons")}
	})
	return rapid.Custom(func(t *rapid.T) threads.Effect {
		return threads.Effect{
			Op: threads.Op(str.Draw(t, "op")), Request: str.Draw(t, "request"), Surface: str.Draw(t, "surface"),
			Channel: opt.Draw(t, "channel"), User: opt.Draw(t, "user"), Ref: opt.Draw(t, "ref"),
			Save: opt.Draw(t, "save"), Expand: opt.Draw(t, "expand"),
			Message: chat.Message{Request: str.Draw(t, "m_request"), Kind: str.Draw(t, "kind"), Text: opt.Draw(t, "text"),
				Card: jsonxtest.Optional(card, full).Draw(t, "card"), Broadcast: full || rapid.Bool().Draw(t, "broadcast"),
				IdempotencyKey: opt.Draw(t, "key"), Recipient: opt.Draw(t, "recipient")},
		}
	})
}

// TestEffectEncodeIsMarshal: an effect's payload is what json.Marshal
// writes, byte for byte, for any effect (its connectors decode it with
// json.Unmarshal).
func TestEffectEncodeIsMarshal(t *testing.T) {
	jsonxtest.EncodesAsMarshal(t, genEffect(false), threads.Encode)
}

// TestEffectCodecCoversEveryField: with every field of an effect, its
// message and its card set, the payload holds each of them: a field added
// to the types but not to encode fails here.
func TestEffectCodecCoversEveryField(t *testing.T) {
	jsonxtest.KeepsEveryField(t, genEffect(true), threads.Encode, store.Decode)
}
