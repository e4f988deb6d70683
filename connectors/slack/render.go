package slack

import (
	"fmt"
	"regexp"
	"strings"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackutilsx"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
)

// Block Kit and message limits (docs.slack.dev, "Block Kit reference").
const (
	maxSectionText = 3000  // section text
	maxFieldText   = 2000  // one section field
	maxFields      = 10    // fields per section
	maxContextText = 2000  // a context element's text (we use it for the status)
	maxButtonLabel = 75    // button text
	maxConfirmHead = 100   // a confirm dialog's title
	maxConfirmText = 300   // a confirm dialog's text
	maxConfirmBtn  = 30    // a confirm dialog's confirm and deny buttons
	maxButtonValue = 2000  // button value
	maxIDLen       = 255   // block_id, action_id
	maxButtons     = 25    // elements of an actions block
	maxMessageText = 39000 // text of a message (Slack truncates at 40,000)
	maxBlocks      = 50    // blocks of a message
)

// Blocks renders a card as Block Kit blocks, the one rendering of chat.Card
// for Slack (thread parents, approval cards and their outcomes alike):
//
//   - the title, bold ("R20261129-07 · coder · asked by @sarah": a section,
//     not a header block, because header text is plain and cannot show a
//     person by name; slack:U… becomes a <@U…> mention that Slack renders
//     with the user's current name);
//   - the text (the ask, the action to approve);
//   - the fields, ten to a section, in as many sections as Block Kit's 50
//     blocks leave (the last one counting the fields that did not fit);
//   - the status line as a context block ("running · 60%", "Approved by …");
//   - the buttons in one actions block whose block_id is card.BlockID
//     ("approval:<id>:<version>"), so a click names exactly what it decides.
//
// A card without buttons renders no actions block: updating an approval card
// with its outcome removes the buttons.
func Blocks(card chat.Card) []slackgo.Block {
	var bs []slackgo.Block
	if card.Title != "" {
		bs = append(bs, section("*"+Mrkdwn(card.Title, maxSectionText-2)+"*"))
	}
	if card.Text != "" {
		bs = append(bs, section(Mrkdwn(card.Text, maxSectionText)))
	}
	bs = append(bs, fieldSections(card.Fields, maxBlocks-len(bs)-2)...) // room for the status and buttons
	if card.Status != "" {
		bs = append(bs, slackgo.NewContextBlock("", mrkdwnObject(Mrkdwn(card.Status, maxContextText))))
	}
	if len(card.Buttons) > 0 {
		var els []slackgo.BlockElement
		for _, b := range card.Buttons[:min(len(card.Buttons), maxButtons)] {
			els = append(els, buttonElement(b))
		}
		bs = append(bs, slackgo.NewActionBlock(clip.Text(card.BlockID, maxIDLen, clip.Runes), els...))
	}
	return bs
}

// fieldSections renders fields ten to a section, in at most room sections; fields that do not fit
// are counted in the last one ("… and 12 more fields").
func fieldSections(fields []chat.Field, room int) []slackgo.Block {
	var bs []slackgo.Block
	for i := 0; i < len(fields) && room > 0; i += maxFields {
		var fs []*slackgo.TextBlockObject
		end := min(i+maxFields, len(fields))
		more := 0
		if len(bs) == room-1 && len(fields) > end {
			end--
			more = len(fields) - end
		}
		for _, f := range fields[i:end] {
			fs = append(fs, mrkdwnObject(Mrkdwn("*"+f.Label+"*\n"+f.Value, maxFieldText)))
		}
		if more > 0 {
			fs = append(fs, mrkdwnObject(Mrkdwn(fmt.Sprintf("… and %d more fields", more), maxFieldText)))
		}
		bs = append(bs, slackgo.NewSectionBlock(nil, fs, nil))
		if more > 0 {
			break
		}
	}
	return bs
}

// buttonElement renders b within Block Kit's limits: its text, value and action_id, and its
// confirmation dialog (title, text, confirm and deny buttons).
func buttonElement(b chat.Button) *slackgo.ButtonBlockElement {
	btn := slackgo.NewButtonBlockElement(clip.Text(b.ActionID, maxIDLen, clip.Runes), clip.Text(b.Value, maxButtonValue, clip.Runes),
		plain(b.Label, maxButtonLabel))
	switch b.Style {
	case string(slackgo.StylePrimary), string(slackgo.StyleDanger):
		btn = btn.WithStyle(slackgo.Style(b.Style))
	}
	if b.Confirm != "" {
		btn = btn.WithConfirm(slackgo.NewConfirmationBlockObject(plain(b.Label+"?", maxConfirmHead),
			plain(b.Confirm, maxConfirmText), plain(b.Label, maxConfirmBtn), plain("Cancel", maxConfirmBtn)))
	}
	return btn
}

func plain(s string, limit int) *slackgo.TextBlockObject {
	return slackgo.NewTextBlockObject(slackgo.PlainTextType, clip.Text(s, limit, clip.Runes), false, false)
}

// FallbackText is a message's text field: what notifications and screen
// readers show for a card, the whole message for plain text.
func FallbackText(m chat.Message) string {
	text := m.Text
	if text == "" && m.Card != nil {
		text = m.Card.Title
		if m.Card.Status != "" {
			text += " — " + m.Card.Status
		}
	}
	if text == "" {
		text = "(empty)"
	}
	return Mrkdwn(text, maxMessageText)
}

func section(text string) *slackgo.SectionBlock {
	return slackgo.NewSectionBlock(mrkdwnObject(text), nil, nil)
}

func mrkdwnObject(text string) *slackgo.TextBlockObject {
	return slackgo.NewTextBlockObject(slackgo.MarkdownType, text, false, false)
}

// userRef matches a Slack user written the bridge's way (slack:U123).
var userRef = regexp.MustCompile(`\bslack:([UW][A-Z0-9]+)\b`)

// Mrkdwn makes platform-neutral text safe as Slack mrkdwn of at most limit
// characters: &, < and > are escaped (so no text can ping @channel or fake a
// link), then slack:U… users become mentions.
func Mrkdwn(text string, limit int) string {
	s := slackutilsx.EscapeMessage(text)
	if cut := clip.Text(s, limit-1, clip.Runes); cut != s {
		// Not in the middle of an &entity;, and " …" so that the marker
		// does not stick to a link or a mention.
		cut = strings.TrimSuffix(cut, clip.Marker)
		if i := strings.LastIndexByte(cut, '&'); i >= 0 && i > len(cut)-5 && !strings.Contains(cut[i:], ";") {
			cut = cut[:i]
		}
		s = cut + " " + clip.Marker
	}
	return userRef.ReplaceAllString(s, "<@$1>")
}

// slackMarkup matches Slack's inbound markup: <@U1>, <@U1|name>, <#C1|name>,
// <!here>, <https://x|label>.
var slackMarkup = regexp.MustCompile(`<([@#!]?)([^<>|]*)(?:\|([^<>]*))?>`)

// unescape undoes Slack's escaping of &, < and > in message text.
var unescape = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// PlainText turns the text of a Slack message into the text people read
// (docs/design.md, chat behaviour): a person becomes slack:U… (who they
// are, whatever their name; the bridge writes it back as a mention), a
// channel #name (#C… without its name), a user group @handle (@S… without
// it), @here, @channel and @everyone stay, a date its fallback text, a
// link "label (URL)" or its URL when the label only repeats it, and
// Slack's escaped &, < and > are restored.
func PlainText(text string) string {
	s := slackMarkup.ReplaceAllStringFunc(text, func(m string) string {
		p := slackMarkup.FindStringSubmatch(m)
		target, label := p[2], p[3]
		switch p[1] {
		case "@":
			return chat.Slack + ":" + target
		case "#":
			if label != "" {
				return "#" + label
			}
			return "#" + target
		case "!":
			return special(target, label)
		}
		return chat.LinkText(label, target)
	})
	return strings.TrimSpace(unescape.Replace(s))
}

// special renders Slack's <!…> markup: <!here>, <!subteam^S1|@team>,
// <!date^…|fallback>.
func special(target, label string) string {
	name, id, _ := strings.Cut(target, "^")
	switch name {
	case "subteam":
		if label != "" {
			return "@" + strings.TrimPrefix(label, "@")
		}
		return "@" + id
	case "here", "channel", "everyone":
		return "@" + name
	}
	if label != "" {
		return label
	}
	return "@" + name
}

// stripMention removes the mentions of bot (its user ID) from a message's
// raw text; if bot is not known yet, the leading mention, which is the one
// that made Slack send an app_mention.
func stripMention(text, bot string) string {
	if bot != "" {
		return slackMarkup.ReplaceAllStringFunc(text, func(m string) string {
			if p := slackMarkup.FindStringSubmatch(m); p[1] == "@" && p[2] == bot {
				return ""
			}
			return m
		})
	}
	t := strings.TrimSpace(text)
	if loc := slackMarkup.FindStringSubmatchIndex(t); loc != nil && loc[0] == 0 && t[loc[2]:loc[3]] == "@" {
		return t[loc[1]:]
	}
	return text
}
