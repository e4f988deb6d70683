package feishu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
)

// Size bounds of a card (Feishu: at most 30 KB of card JSON, 200 elements;
// card JSON 2.0): the text and field values start at these and shrink until
// the card's JSON fits cardBudget (cardContent).
const (
	maxCardText  = 4000  // runes of a card's text
	maxFieldText = 500   // runes of a field value
	maxFields    = 20    // fields shown on a card
	maxTitle     = 200   // runes of the header's title
	maxLabel     = 100   // runes of a button's text
	maxValue     = 255   // runes of each part of a button's value
	maxButtons   = 5     // buttons on a card (Slack's actions block takes 25; ours have 2)
	cardBudget   = 28000 // bytes of card JSON, under Feishu's 30 KB
)

// bounds are the sizes a card is rendered with.
type bounds struct{ text, field, fields int }

var fullBounds = bounds{text: maxCardText, field: maxFieldText, fields: maxFields}

// shrink returns smaller bounds for a card that rendered to size bytes,
// and false when they cannot shrink further.
func (b bounds) shrink(size int) (bounds, bool) {
	if b.text <= 1 && b.field <= 1 && b.fields == 0 {
		return b, false
	}
	f := float64(cardBudget) / float64(size) * 0.9
	b.text, b.field = int(float64(b.text)*f), int(float64(b.field)*f)
	if b.field < 20 {
		b.fields /= 2
	}
	return b, true
}

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
func renderCard(m chat.Message, topic string, lim bounds) card {
	c := card{Schema: "2.0", Config: cardConfig{UpdateMulti: true}, Body: cardBody{Elements: []any{}}}
	cc := m.Card
	if cc == nil {
		cc = &chat.Card{Text: m.Text}
	}
	if cc.Title != "" {
		c.Header = &cardHeader{Title: text(clip.Text(cc.Title, maxTitle, clip.Runes)), Template: template(cc)}
	}
	if cc.Text != "" {
		c.Body.Elements = append(c.Body.Elements, textDiv(clip.Text(cc.Text, lim.text, clip.Runes)))
	}
	for i, f := range cc.Fields {
		if i == lim.fields {
			c.Body.Elements = append(c.Body.Elements, textDiv(fmt.Sprintf("… %d more", len(cc.Fields)-i)))
			break
		}
		c.Body.Elements = append(c.Body.Elements, textDiv(clip.Text(f.Label+": "+f.Value, lim.field, clip.Runes)))
	}
	if cc.Status != "" {
		c.Body.Elements = append(c.Body.Elements, textDiv("Status: "+clip.Text(cc.Status, maxFieldText, clip.Runes)))
	}
	if len(cc.Buttons) > 0 {
		c.Body.Elements = append(c.Body.Elements, buttons(cc, topic))
	}
	if len(c.Body.Elements) == 0 {
		c.Body.Elements = append(c.Body.Elements, textDiv(" "))
	}
	return c
}

// buttons renders the first maxButtons buttons of cc in a column set, each
// value naming topic when it is not "".
func buttons(cc *chat.Card, topic string) columnSet {
	set := columnSet{Tag: "column_set", FlexMode: "none"}
	for i, b := range cc.Buttons[:min(len(cc.Buttons), maxButtons)] {
		value := map[string]string{valueBlock: clip.Text(cc.BlockID, maxValue, clip.Runes),
			valueAction: clip.Text(b.ActionID, maxValue, clip.Runes), valueValue: clip.Text(b.Value, maxValue, clip.Runes)}
		if topic != "" {
			value[valueTopic] = topic
		}
		btn := button{
			Tag:       "button",
			ElementID: elementID(i, b.ActionID),
			Text:      text(clip.Text(b.Label, maxLabel, clip.Runes)),
			Type:      buttonType(b.Style),
			Behaviors: []behavior{{Type: "callback", Value: value}},
		}
		if b.Confirm != "" {
			btn.Confirm = &confirm{Title: text(clip.Text(b.Label+"?", maxLabel, clip.Runes)), Text: text(clip.Text(b.Confirm, maxFieldText, clip.Runes))}
		}
		set.Columns = append(set.Columns, column{Tag: "column", Width: "auto", Elements: []any{btn}})
	}
	return set
}

// cardContent is the content string of an interactive message, posted in
// topic ("": none, or not known: its clicks then keep their order per card
// only): the card rendered with fullBounds, shrunk until its JSON fits
// cardBudget. A card that cannot fit (its fixed parts alone too large) is
// a permanent error: no retry makes it smaller.
func cardContent(m chat.Message, topic string) (string, error) {
	lim := fullBounds
	for {
		b, err := marshal(renderCard(m, topic, lim))
		if err != nil {
			return "", fmt.Errorf("feishu: render card: %w", err)
		}
		if len(b) <= cardBudget {
			return string(b), nil
		}
		var ok bool
		if lim, ok = lim.shrink(len(b)); !ok {
			return "", fmt.Errorf("%w: feishu: render card: %d bytes, over %d", chat.ErrPermanent, len(b), cardBudget)
		}
	}
}

// marshal encodes v as JSON without escaping <, > and & (Feishu reads
// JSON, not HTML: escaped, each would take six bytes of the card's 30 KB).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
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

// keepTopic remembers the topic of a card the connector posted in one (the
// topic's root message; a root card is its own topic), so that Update
// renders a card again naming the same topic in its buttons: the clicks on
// a re-rendered card (an approval card's time-left notice keeps its
// buttons) keep their order with the topic's replies. It is in memory and
// bounded (maxTopics, the oldest forgotten first): a card posted by an
// earlier process, or forgotten, is updated without a topic, and its
// clicks then keep their order per card only.
func (c *Connector) keepTopic(msgID, topic string) {
	if msgID != "" && topic != "" {
		c.topics.Put(msgID, topic)
	}
}

// topic returns the topic card msgID was posted in ("": unknown).
func (c *Connector) topic(msgID string) string {
	t, _ := c.topics.Get(msgID)
	return t
}
