package slack

import "testing"

// TestPlainTextAsTyped: what people type, as the agent reads it
// (docs/design.md, chat behaviour).
func TestPlainTextAsTyped(t *testing.T) {
	for in, want := range map[string]string{
		"ask <@U2|bob> and <@W3>":                                 "ask slack:U2 and slack:W3",
		"tell <!subteam^S0614TZR7|@platform> now":                 "tell @platform now",
		"tell <!subteam^S0614TZR7> now":                           "tell @S0614TZR7 now",
		"<!here> <!channel|channel> <!everyone>":                  "@here @channel @everyone",
		"due <!date^1392734382^{date_short}|Feb 18, 2014>":        "due Feb 18, 2014",
		"see <https://x.test/a|the doc> and <https://x.test/b>":   "see the doc (https://x.test/a) and https://x.test/b",
		"mail <mailto:a@x.test|a@x.test>, <http://x.test|x.test>": "mail a@x.test, http://x.test",
		"in <#C1|backend> or <#C2>":                               "in #backend or #C2",
		"a &lt;b&gt; &amp;&amp; c &amp;lt;":                       "a <b> && c &lt;",
	} {
		if got := PlainText(in); got != want {
			t.Errorf("PlainText(%q) = %q, want %q", in, got, want)
		}
	}
}
