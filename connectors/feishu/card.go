package feishu

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
)

// Size bounds, well under Feishu's 30 KB per card and 150 KB per text message
// (a rune is at most 3 bytes in the scripts people write).
const (
	maxCardText  = 4000  // runes of a card's text
	maxFieldText = 500   // runes of a field value
	maxFields    = 20    // fields shown on a card
	maxText      = 30000 // runes of a text message
)

// Button values name what a click decides; the SDK needs an object value.
// A card posted in a topic also names the topic (its root message): Feishu's
// callback does not, and the click is to keep its order with the topic's
// replies (chat.Event.Lane).
const (
	valueBlock  = "block_id"
	valueAction = "action_id"
	valueValue  = "value"
	valueTopic  = "topic"
)

// card is Feishu card JSON 2.0 (shared by construction: 2.0 cards always are,
// update_multi says so explicitly for clients that read it).
type card struct {
	Schema string      `json:"schema"`
	Config cardConfig  `json:"config"`
	Header *cardHeader `json:"header,omitempty"`
	Body   cardBody    `json:"body"`
}

type cardConfig struct {
	UpdateMulti bool `json:"update_multi"`
}

type cardHeader struct {
	Title    plainText `json:"title"`
	Template string    `json:"template,omitempty"`
}

type cardBody struct {
	Elements []any `json:"elements"`
}

type plainText struct {
	Tag     string `json:"tag"`
	Content string `json:"content"`
}

type div struct {
	Tag  string    `json:"tag"`
	Text plainText `json:"text"`
}

type columnSet struct {
	Tag      string   `json:"tag"`
	FlexMode string   `json:"flex_mode"`
	Columns  []column `json:"columns"`
}

type column struct {
	Tag      string `json:"tag"`
	Width    string `json:"width"`
	Elements []any  `json:"elements"`
}

type button struct {
	Tag       string     `json:"tag"`
	ElementID string     `json:"element_id"`
	Text      plainText  `json:"text"`
	Type      string     `json:"type"`
	Confirm   *confirm   `json:"confirm,omitempty"`
	Behaviors []behavior `json:"behaviors"`
}

// confirm is a button's confirmation dialog (card JSON 2.0): the click
// counts once the clicker confirms.
type confirm struct {
	Title plainText `json:"title"`
	Text  plainText `json:"text"`
}

type behavior struct {
	Type  string            `json:"type"`
	Value map[string]string `json:"value"`
}

func text(s string) plainText { return plainText{Tag: "plain_text", Content: s} }

func textDiv(s string) div { return div{Tag: "div", Text: text(s)} }

// renderCard renders m as a card: the title as the header (coloured by the
// status), the text, the fields, the status line and the buttons, whose
// values name topic when it is not "" (the root of the topic the card is
// posted in). All text is plain_text, so nothing a user wrote is read as
// markup.
func renderCard(m chat.Message, topic string) card {
	c := card{Schema: "2.0", Config: cardConfig{UpdateMulti: true}, Body: cardBody{Elements: []any{}}}
	cc := m.Card
	if cc == nil {
		cc = &chat.Card{Text: m.Text}
	}
	if cc.Title != "" {
		c.Header = &cardHeader{Title: text(clip.Text(cc.Title, 200, clip.Runes)), Template: template(cc)}
	}
	if cc.Text != "" {
		c.Body.Elements = append(c.Body.Elements, textDiv(clip.Text(cc.Text, maxCardText, clip.Runes)))
	}
	for i, f := range cc.Fields {
		if i == maxFields {
			c.Body.Elements = append(c.Body.Elements, textDiv(fmt.Sprintf("… %d more", len(cc.Fields)-i)))
			break
		}
		c.Body.Elements = append(c.Body.Elements, textDiv(f.Label+": "+clip.Text(f.Value, maxFieldText, clip.Runes)))
	}
	if cc.Status != "" {
		c.Body.Elements = append(c.Body.Elements, textDiv("Status: "+clip.Text(cc.Status, maxFieldText, clip.Runes)))
	}
	if len(cc.Buttons) > 0 {
		set := columnSet{Tag: "column_set", FlexMode: "none"}
		for i, b := range cc.Buttons {
			value := map[string]string{valueBlock: cc.BlockID, valueAction: b.ActionID, valueValue: b.Value}
			if topic != "" {
				value[valueTopic] = topic
			}
			btn := button{
				Tag:       "button",
				ElementID: elementID(i, b.ActionID),
				Text:      text(b.Label),
				Type:      buttonType(b.Style),
				Behaviors: []behavior{{Type: "callback", Value: value}},
			}
			if b.Confirm != "" {
				btn.Confirm = &confirm{Title: text(b.Label + "?"), Text: text(clip.Text(b.Confirm, maxFieldText, clip.Runes))}
			}
			set.Columns = append(set.Columns, column{Tag: "column", Width: "auto", Elements: []any{btn}})
		}
		c.Body.Elements = append(c.Body.Elements, set)
	}
	if len(c.Body.Elements) == 0 {
		c.Body.Elements = append(c.Body.Elements, textDiv(" "))
	}
	return c
}

// cardContent is the content string of an interactive message, posted in
// topic ("": none, or not known: its clicks then keep their order per card
// only).
func cardContent(m chat.Message, topic string) (string, error) {
	b, err := json.Marshal(renderCard(m, topic))
	if err != nil {
		return "", fmt.Errorf("feishu: render card: %w", err)
	}
	return string(b), nil
}

// messageContent renders m as a card (posted in topic, see cardContent)
// when it has one, else as a text message.
func messageContent(m chat.Message, topic string) (msgType, content string, err error) {
	if m.Card != nil {
		content, err = cardContent(m, topic)
		return larkim.MsgTypeInteractive, content, err
	}
	b, err := json.Marshal(map[string]string{"text": clip.Text(m.Text, maxText, clip.Runes)})
	if err != nil {
		return "", "", fmt.Errorf("feishu: render text: %w", err)
	}
	return larkim.MsgTypeText, string(b), nil
}

// template colours a card's header by what its status says.
func template(c *chat.Card) string {
	s := strings.ToLower(c.Status)
	switch {
	case len(c.Buttons) > 0 || strings.HasPrefix(s, "pending"):
		return "orange"
	case strings.HasPrefix(s, "done"), strings.HasPrefix(s, "approved by"):
		return "green"
	case strings.HasPrefix(s, "failed"), strings.HasPrefix(s, "denied"):
		return "red"
	case strings.HasPrefix(s, "cancelled"), strings.HasPrefix(s, "expired"), strings.HasPrefix(s, "withdrawn"):
		return "grey"
	}
	return "blue"
}

func buttonType(style string) string {
	switch style {
	case "primary", "danger":
		return style
	}
	return "default"
}

// elementID makes a card element ID Feishu accepts: a letter first, then
// letters, digits and underscores, at most 20 characters, unique per card.
func elementID(i int, action string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "b%d_", i)
	for _, r := range action {
		if b.Len() == 20 {
			break
		}
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// maxTopics bounds the cards whose topic a connector remembers (topics).
const maxTopics = 10000

// topics remembers the topic of each card the connector posted in one (the
// topic's root message; a root card is its own topic), so that Update
// renders a card again naming the same topic in its buttons: the clicks on
// a re-rendered card (an approval card's time-left notice keeps its
// buttons) keep their order with the topic's replies. It is in memory and
// bounded (the oldest forgotten first): a card posted by an earlier
// process, or forgotten, is updated without a topic, and its clicks then
// keep their order per card only.
type topics struct {
	mu    sync.Mutex
	of    map[string]string // message ID → topic
	order []string          // the keys of of, oldest first
}

// keep records that card msgID is in topic.
func (t *topics) keep(msgID, topic string) {
	if msgID == "" || topic == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.of == nil {
		t.of = map[string]string{}
	}
	if _, ok := t.of[msgID]; ok {
		return
	}
	for len(t.order) >= maxTopics {
		delete(t.of, t.order[0])
		t.order = t.order[1:]
	}
	t.of[msgID] = topic
	t.order = append(t.order, msgID)
}

// topic returns the topic card msgID was posted in ("": unknown).
func (t *topics) topic(msgID string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.of[msgID]
}
