package feishu

import "testing"

// TestMessageTextAsTyped: what people type in Feishu, as the agent reads it
// (docs/design.md, chat behaviour): the bot's mention taken off, people as
// @name, everyone as @all, links as "label (URL)".
func TestMessageTextAsTyped(t *testing.T) {
	ms := []mention{{key: "@_user_1", name: "roombridge", bot: true}, {key: "@_user_2", name: "Ann"}, {key: "@_all", name: "所有人"}}
	for _, tc := range []struct{ typ, content, want string }{
		{"text", `{"text":"@_user_1 ping @_user_2 and @_all"}`, "ping @Ann and @all"},
		{"post", `{"title":"","content":[[{"tag":"at","user_id":"@_user_1"},{"tag":"text","text":" see "},` +
			`{"tag":"a","text":"the doc","href":"https://x.test/a"},{"tag":"text","text":" and "},` +
			`{"tag":"a","text":"https://x.test/b","href":"https://x.test/b"},{"tag":"at","user_id":"all"}]]}`,
			"see the doc (https://x.test/a) and https://x.test/b @all"},
	} {
		if got := messageText(tc.typ, tc.content, append([]mention(nil), ms...)); got != tc.want {
			t.Errorf("messageText(%s, %s) = %q, want %q", tc.typ, tc.content, got, tc.want)
		}
	}
}
