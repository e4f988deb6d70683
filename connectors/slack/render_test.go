package slack

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
)

func TestBlocksApprovalCard(t *testing.T) {
	card := chat.Card{
		Title:   "Approval needed · R20261129-07 · coder",
		Text:    "deploy <prod> & notify <!channel>",
		Fields:  []chat.Field{{Label: "Asked by", Value: "slack:U123"}, {Label: "Expires", Value: "14:02 UTC"}},
		Status:  "waiting for a decision",
		BlockID: "approval:R20261129-07:1",
		Buttons: []chat.Button{
			{ActionID: "approve", Label: "Approve", Value: "R20261129-07", Style: "primary"},
			{ActionID: "deny", Label: "Deny", Value: "R20261129-07", Style: "danger"},
		},
	}
	b, err := json.Marshal(Blocks(card))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		`"text":"*Approval needed · R20261129-07 · coder*"`,
		`deploy \u0026lt;prod\u0026gt; \u0026amp; notify \u0026lt;!channel\u0026gt;`, // escaped: no @channel ping
		`*Asked by*\n\u003c@U123\u003e`,                                              // the user as a mention
		`"type":"context"`, `waiting for a decision`,
		`"type":"actions","block_id":"approval:R20261129-07:1"`,
		`"text":"Approve","emoji":false},"action_id":"approve","value":"R20261129-07","style":"primary"`,
		`"text":"Deny","emoji":false},"action_id":"deny","value":"R20261129-07","style":"danger"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("blocks lack %s:\n%s", want, got)
		}
	}

	card.Buttons, card.Status = nil, "approved by slack:UOWNER at 14:02 UTC"
	b, _ = json.Marshal(Blocks(card))
	if strings.Contains(string(b), `"actions"`) {
		t.Errorf("the outcome still has buttons: %s", b)
	}
	if !strings.Contains(string(b), "approved by \\u003c@UOWNER\\u003e at 14:02 UTC") {
		t.Errorf("the outcome does not name the approver: %s", b)
	}
}

func TestMrkdwnLimits(t *testing.T) {
	long := strings.Repeat("a&", 3000)
	got := Mrkdwn(long, maxSectionText)
	if n := len([]rune(got)); n > maxSectionText {
		t.Fatalf("%d characters, limit %d", n, maxSectionText)
	}
	if !strings.HasSuffix(got, " …") || strings.HasSuffix(strings.TrimSuffix(got, " …"), "&am") {
		t.Errorf("bad cut: …%q", got[len(got)-20:])
	}
	if got := FallbackText(chat.Message{Card: &chat.Card{Title: "R1 · a · asked by slack:U9", Status: "done"}}); got != "R1 · a · asked by <@U9> — done" {
		t.Errorf("fallback %q", got)
	}
}

func TestPlainText(t *testing.T) {
	for in, want := range map[string]string{
		"<@U0BOT> coder fix <#C1|backend> see <https://x.test/a?b=1&amp;c=2|the doc> &lt;3": "slack:U0BOT coder fix #backend see the doc (https://x.test/a?b=1&c=2) <3",
		"ping <!here> and <@U2|bob>": "ping @here and slack:U2",
	} {
		if got := PlainText(in); got != want {
			t.Errorf("PlainText(%q) = %q, want %q", in, got, want)
		}
	}
	if got := stripMention("<@U0BOT> coder hi <@U0BOT>", "U0BOT"); strings.TrimSpace(got) != "coder hi" {
		t.Errorf("stripMention with the bot known: %q", got)
	}
	if got := stripMention("  <@U0BOT> coder hi <@U2>", ""); strings.TrimSpace(got) != "coder hi <@U2>" {
		t.Errorf("stripMention without the bot known: %q", got)
	}
}

func parse(t *testing.T, body []byte) slackevents.EventsAPIEvent {
	t.Helper()
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestFromEventsAPI(t *testing.T) {
	c := &Connector{}
	bot := slacktest.BotUserID
	c.botUser.Store(&bot)

	ev, ok := c.fromEventsAPI(parse(t, slacktest.AppMentionEvent("Ev1", "C1", "U1", "<@U0BOT> coder say hi", "100.000001", "")))
	if !ok || ev.Kind != chat.Ask || ev.ID != "Ev1" || ev.Channel != "C1" || ev.User != "slack:U1" || ev.Text != "coder say hi" || ev.Thread != nil {
		t.Errorf("top-level mention → %+v, %v", ev, ok)
	}
	ev, ok = c.fromEventsAPI(parse(t, slacktest.MessageEvent("Ev2", "C1", "U1", "more &amp; more", "100.000003", "100.000002")))
	if !ok || ev.Kind != chat.Reply || ev.Text != "more & more" || ev.Thread == nil || *ev.Thread != (chat.ThreadRef{Surface: chat.Slack, Channel: "C1", ID: "100.000002"}) {
		t.Errorf("thread reply → %+v, %v", ev, ok)
	}
	for name, body := range map[string][]byte{
		"mention in a thread (its message event counts)": slacktest.AppMentionEvent("Ev3", "C1", "U1", "<@U0BOT> hi", "100.000004", "100.000002"),
		"top-level message":   slacktest.MessageEvent("Ev4", "C1", "U1", "chatter", "100.000005", ""),
		"the bot's own reply": slacktest.MessageEvent("Ev5", "C1", bot, "agent says", "100.000006", "100.000002"),
	} {
		if ev, ok := c.fromEventsAPI(parse(t, body)); ok {
			t.Errorf("%s → %+v, want ignored", name, ev)
		}
	}
}

func TestFromInteraction(t *testing.T) {
	var ic slackInteraction
	if err := json.Unmarshal(slacktest.BlockActionsPayload("UOWNER", "C1", "100.000009", "100.000002", "approval:R1:2", "approve", "R1"), &ic); err != nil {
		t.Fatal(err)
	}
	evs := fromInteraction(ic)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	ev := evs[0]
	want := chat.ClickAction{BlockID: "approval:R1:2", ActionID: "approve", Value: "R1",
		Message: chat.MessageRef{Surface: chat.Slack, Channel: "C1", ID: "100.000009"}}
	if ev.Kind != chat.Click || ev.User != "slack:UOWNER" || ev.ID == "" || ev.Click == nil || *ev.Click != want ||
		ev.Thread == nil || ev.Thread.ID != "100.000002" {
		t.Errorf("click → %+v (%+v)", ev, ev.Click)
	}
}

type slackInteraction = slackgo.InteractionCallback

// TestDenyAsksToConfirm: a button with Confirm (an approval's Deny) gets
// Slack's confirm object: the click counts once the clicker confirms.
func TestDenyAsksToConfirm(t *testing.T) {
	bs := Blocks(chat.Card{Title: "Approval needed", BlockID: "approval:R1:1", Buttons: []chat.Button{
		{ActionID: "approve", Label: "Approve", Value: "R1"},
		{ActionID: "deny", Label: "Deny", Value: "R1", Style: "danger", Confirm: "Deny R1?"}}})
	raw, err := json.Marshal(bs)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Confirm  *struct {
				Title, Text, Confirm, Deny struct{ Text string }
			} `json:"confirm"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	confirms := map[string]string{}
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.Confirm != nil {
				confirms[e.ActionID] = e.Confirm.Title.Text + " | " + e.Confirm.Text.Text + " | " + e.Confirm.Confirm.Text + " | " + e.Confirm.Deny.Text
			}
		}
	}
	if want := map[string]string{"deny": "Deny? | Deny R1? | Deny | Cancel"}; fmt.Sprint(confirms) != fmt.Sprint(want) {
		t.Errorf("confirms %v, want %v", confirms, want)
	}
}
