package feishu_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/feishu/feishutest"
	"github.com/roombridge/roombridge/connectors/slack/slacktest"
	"github.com/roombridge/roombridge/requests"
)

// A request from start to end, with Feishu's real limits and the
// connector's real pacing: a member's mention makes a pending request whose
// topic starts with a card titled by its ID; the approval card shows in the
// topic and in the approver's chat with the bot; a click by someone who may
// not decide is refused with an error toast; the approver's click answers
// with a toast and every copy of the card shows the decision; the agent
// runs, its progress edits the root card, its messages and final answer are
// replies in the topic, and the root card ends showing done.
func TestRequestEndToEnd(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mode: mode})
			const ask = "say starting; progress 50 halfway; sleep 1200ms; say more; echo all done"
			h.deliver(h.askEvent(member, "coder "+ask))

			rs := h.requests()
			if len(rs) != 1 || rs[0].State != requests.Pending || rs[0].Agent != "coder" || rs[0].Ask != ask ||
				rs[0].Requester != "feishu:"+member {
				t.Fatalf("requests %+v: want one pending ask of coder by feishu:%s, mention and agent name taken off", rs, member)
			}
			id := rs[0].ID.String()
			h.waitFake("the root card and two approval cards", func() bool {
				return len(h.parents(id)) == 1 && len(h.approvalCards(id)) == 2
			})
			parent := h.parents(id)[0]
			var c card
			if err := json.Unmarshal(parent.Content, &c); err != nil || c.Schema != "2.0" || !c.Config.UpdateMulti {
				t.Errorf("root card %s: want card JSON 2.0 with update_multi", parent.Content)
			}
			if title := cardTitle(parent.Content); !strings.Contains(title, "coder") || !strings.Contains(title, "feishu:"+member) {
				t.Errorf("root card title %q does not show agent and requester", title)
			}
			if !strings.Contains(texts(parent.Content), "pending approval") || parent.UUID == "" {
				t.Errorf("root card %s (uuid %q): want the live state and a uuid", parent.Content, parent.UUID)
			}
			var inTopic, dm feishutest.Message
			for _, m := range h.approvalCards(id) {
				switch {
				case m.RootID == parent.ID:
					inTopic = m
				case m.ReceiveIDType == "open_id" && m.ReceiveID == approver:
					dm = m
				}
			}
			if inTopic.ID == "" || !inTopic.ReplyInThread || inTopic.ThreadID == "" || dm.ID == "" {
				t.Fatalf("approval cards %+v: want one in the topic (reply_in_thread) and one to the approver", h.approvalCards(id))
			}

			// Someone who may not decide clicks: refused, nothing changes.
			ans := h.click(feishutest.CardAction{EventID: h.eventID(), Token: vtoken, AppID: h.appID,
				OperatorOpenID: member, Value: button(t, inTopic.Content, "approve"), MessageID: inTopic.ID, ChatID: chatID}.JSON())
			if ans.Toast == nil || ans.Toast.Type != "error" {
				t.Errorf("a member's click answered %+v, want an error toast", ans)
			}
			if r := h.requests()[0]; r.State != requests.Pending {
				t.Fatalf("after a refused click the request is %s", r.State)
			}

			// The approver approves from their chat with the bot.
			ans = h.click(feishutest.CardAction{EventID: h.eventID(), Token: vtoken, AppID: h.appID,
				OperatorOpenID: approver, Value: button(t, dm.Content, "approve"), MessageID: dm.ID, ChatID: dm.ChatID}.JSON())
			if ans.Toast == nil || ans.Toast.Type != "success" || !strings.Contains(ans.Toast.Content, "approved") {
				t.Errorf("the approver's click answered %+v, want a success toast saying approved", ans)
			}
			h.waitStore("the request to end and every effect to be delivered", h.settled(1))
			if r := h.requests()[0]; r.State != requests.Done {
				t.Fatalf("request ended %s (%s)", r.State, r.Reason)
			}

			parent, _ = h.fake.Message(parent.ID)
			if !strings.Contains(texts(parent.Current), "Status: done") {
				t.Errorf("root card now %s, want it to show done", parent.Current)
			}
			var states []string
			for _, p := range parent.Patches {
				states = append(states, texts(p.Content))
			}
			if !slices.ContainsFunc(states, func(s string) bool { return strings.Contains(s, "running · 50% · halfway") }) {
				t.Errorf("root card revisions %q never showed the progress", states)
			}
			for _, m := range []feishutest.Message{inTopic, dm} {
				m, _ = h.fake.Message(m.ID)
				if got := texts(m.Current); !strings.Contains(got, "approved by feishu:"+approver) || strings.Contains(string(m.Current), `"button"`) {
					t.Errorf("approval card %s now %s: want the decision and no buttons", m.ID, m.Current)
				}
			}
			var replies []string
			for _, m := range h.fake.Thread(parent.ID)[1:] {
				if m.ThreadID != inTopic.ThreadID || !m.ReplyInThread {
					t.Errorf("reply %+v is not in the request's topic", m)
				}
				if m.MsgType == "interactive" {
					replies = append(replies, cardTitle(m.Content))
				} else {
					replies = append(replies, strings.TrimSuffix(texts(m.Content), "\n"))
				}
			}
			want := []string{cardTitle(inTopic.Content), "starting", "more", "all done"}
			if !slices.Equal(replies, want) {
				t.Errorf("topic replies %q, want %q", replies, want)
			}
			if n := h.fake.RateLimited(); n != 0 {
				t.Errorf("%d rate-limited answers", n)
			}
		})
	}
}

// The same event delivered twice (a long-connection re-push, an HTTP retry)
// makes one request, one topic and one answer.
func TestDuplicateEventMakesOneRequest(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, setup{mode: mode})
			body := h.askEvent(owner, "echo once")
			if mode == feishu.ModeWS {
				first, err := h.fake.PushEvent(h.ctx(), body)
				if err != nil {
					t.Fatal(err)
				}
				h.waitAck(first)
				again, err := h.fake.Redeliver(h.ctx(), first)
				if err != nil {
					t.Fatal(err)
				}
				h.waitAck(again)
			} else {
				h.deliver(body)
				h.deliver(body)
			}
			h.waitStore("the request to end and its effects to be delivered", h.settled(1))
			id := h.requests()[0].ID.String()
			ps := h.parents(id)
			if len(ps) != 1 {
				t.Fatalf("%d root cards for %s, want 1", len(ps), id)
			}
			if th := h.fake.Thread(ps[0].ID); len(th) != 2 || texts(th[1].Content) != "once\n" {
				t.Errorf("topic %+v: want the root card and one answer", th)
			}
			if n := len(h.fake.Messages()); n != 2 {
				t.Errorf("%d messages sent, want 2 (root card, answer)", n)
			}
		})
	}
}

// Forged, replayed, tampered and oversized callbacks are each refused with a
// clear status and reason, and change nothing; a good one then goes through.
func TestCallbackRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mode: feishu.ModeCallback})
	good := h.askEvent(owner, "echo hi")
	url := h.bridge.URL + feishu.EventsPath
	encrypted := func(body []byte) []byte {
		enc, err := feishutest.Encrypt(encryptKey, body)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(enc)
	}
	cases := []struct {
		name   string
		body   []byte // sent as is, signed with the encrypt key unless unsigned
		at     time.Time
		mutate func(h map[string][]string)
		status int
		reason string
	}{
		{name: "bad signature", body: encrypted(good), at: time.Now(),
			mutate: func(hd map[string][]string) { hd[feishutest.HeaderSignature] = []string{strings.Repeat("0", 64)} },
			status: 401, reason: "bad X-Lark-Signature"},
		{name: "no signature", body: encrypted(good), at: time.Now(),
			mutate: func(hd map[string][]string) { delete(hd, feishutest.HeaderSignature) },
			status: 401, reason: "missing X-Lark-Signature"},
		{name: "wrong verification token", body: encrypted(bytes.Replace(good, []byte(vtoken), []byte("forged-token"), 1)),
			at: time.Now(), status: 401, reason: "wrong verification token"},
		{name: "stale timestamp", body: encrypted(good), at: time.Now().Add(-6 * time.Minute),
			status: 401, reason: "stale or invalid X-Lark-Request-Timestamp"},
		{name: "timestamp from the future", body: encrypted(good), at: time.Now().Add(6 * time.Minute),
			status: 401, reason: "stale or invalid X-Lark-Request-Timestamp"},
		{name: "undecryptable body", body: func() []byte {
			enc, err := feishutest.Encrypt("another-key", good)
			if err != nil {
				t.Fatal(err)
			}
			return []byte(enc)
		}(), at: time.Now(), status: 400, reason: "cannot decrypt body with the encrypt key"},
		{name: "not an encrypted event", body: good, at: time.Now(), status: 400, reason: "body is not an encrypted event"},
		{name: "oversize body", body: bytes.Repeat([]byte(" "), feishu.MaxBody+1), at: time.Now(),
			status: 413, reason: "body over 1 MiB"},
	}
	for _, tc := range cases {
		req, err := feishutest.SignedRequest(h.ctx(), url, encryptKey, tc.body, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if tc.mutate != nil {
			tc.mutate(req.Header)
		}
		req.Close = true
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		code := resp.StatusCode
		var answer struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(body, &answer)
		if code != tc.status || answer.Error != tc.reason {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, answer.Error, tc.status, tc.reason)
		}
	}
	if rs := h.requests(); len(rs) != 0 {
		t.Fatalf("refused callbacks made requests: %+v", rs)
	}
	if ms := h.fake.Messages(); len(ms) != 0 {
		t.Fatalf("refused callbacks sent messages: %+v", ms)
	}
	if !strings.Contains(h.logs.String(), "callback refused") {
		t.Error("refusals were not logged")
	}
	h.deliver(good)
	h.waitStore("the good request to end", h.settled(1))
}

// The url_verification challenge is answered (encrypted, unsigned, as
// Feishu sends it when the URL is configured) only with the right token.
func TestCallbackChallenge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mode: feishu.ModeCallback})
	for _, tc := range []struct {
		token  string
		status int
	}{{vtoken, 200}, {"forged-token", 401}} {
		body, _ := json.Marshal(map[string]string{"challenge": "c-123", "token": tc.token, "type": "url_verification"})
		enc, err := feishutest.Encrypt(encryptKey, body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := feishutest.SignedRequest(h.ctx(), h.bridge.URL+feishu.EventsPath, encryptKey, []byte(enc), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Del(feishutest.HeaderSignature)
		code, resp := h.do(req)
		if code != tc.status || (code == 200 && !bytes.Contains(resp, []byte(`"challenge":"c-123"`))) {
			t.Errorf("challenge with token %q: %d %s, want %d", tc.token, code, resp, tc.status)
		}
	}
}

// A burst of 100 requests into one chat stays under the fake's enforced
// limits: zero rate-limited answers, every root card posted once, every
// answer in its own topic. Both the fake's and the connector's limits are
// ten times Feishu's, to keep the test short; the ratio is what is tested.
func TestBurstStaysUnderLimits(t *testing.T) {
	t.Parallel()
	const n = 100
	h := newHarness(t, setup{mode: feishu.ModeWS,
		fake: []feishutest.Option{feishutest.WithRateLimits(feishutest.RateLimits{PerChat: 50, PerApp: 500, PerPatch: 50})},
		conn: func(o *feishu.Options) {
			o.Limits = feishu.Limits{PerChat: 50, PerApp: 500, PerMessage: 50}
			o.EditEvery = feishu.DefaultEditEvery / 10
		}})
	start := time.Now()
	var frames []string
	for i := range n {
		id, err := h.fake.PushEvent(h.ctx(), h.askEvent(owner, fmt.Sprintf("echo answer %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, id)
	}
	for _, id := range frames {
		h.waitAck(id)
	}
	h.waitStore("all requests to end and every effect to be delivered", h.settled(n))
	t.Logf("%d requests asked, run and delivered in %s", n, time.Since(start).Round(time.Millisecond))
	if got := h.fake.RateLimited(); got != 0 {
		t.Errorf("%d rate-limited answers, want 0", got)
	}
	for _, r := range h.requests() {
		id := r.ID.String()
		ps := h.parents(id)
		if len(ps) != 1 {
			t.Errorf("%s: %d root cards", id, len(ps))
			continue
		}
		th := h.fake.Thread(ps[0].ID)
		if want := strings.TrimPrefix(r.Ask, "echo ") + "\n"; len(th) != 2 || texts(th[1].Content) != want {
			t.Errorf("%s: topic %+v, want one answer %q", id, th, want)
		}
		if !strings.Contains(texts(h.mustMessage(ps[0].ID).Current), "Status: done") {
			t.Errorf("%s: root card does not show done", id)
		}
	}
}

func (h *harness) mustMessage(id string) feishutest.Message {
	h.t.Helper()
	m, ok := h.fake.Message(id)
	if !ok {
		h.t.Fatalf("no message %s", id)
	}
	return m
}

// A decision made on Slack updates the Feishu copies of the same approval
// card, and one made on Feishu updates the Slack copy: one room bound to a
// Feishu chat and a Slack channel, approvers on both, both connectors
// running against their fakes.
func TestDecisionOnOneSurfaceUpdatesTheOther(t *testing.T) {
	t.Parallel()
	h := newHarness(t, setup{mode: feishu.ModeWS, slack: true})

	slackCard := func(id string) (slacktest.Message, bool) {
		for _, m := range h.slack.Messages() {
			if bytes.Contains(m.BlocksJSON, []byte("approval:"+id+":")) {
				return m, true
			}
		}
		return slacktest.Message{}, false
	}
	ask := func(text string) string {
		h.deliver(h.askEvent(member, text))
		var id string
		for _, r := range h.requests() {
			if r.Ask == text {
				id = r.ID.String()
			}
		}
		if id == "" {
			t.Fatalf("no request for %q", text)
		}
		h.waitFake("the Feishu approval cards of "+id, func() bool { return len(h.approvalCards(id)) == 2 })
		if err := h.slack.WaitFor(h.ctx(), func(*slacktest.Server) bool { _, ok := slackCard(id); return ok }); err != nil {
			t.Fatalf("waiting for the Slack approval card of %s: %v", id, err)
		}
		return id
	}

	// Approved on Slack: both Feishu copies show it.
	first := ask("echo first")
	sm, _ := slackCard(first)
	env, err := h.slack.PushInteractive(h.ctx(), slacktest.BlockActionsPayload(slackOwner, sm.Channel, sm.TS, "",
		"approval:"+first+":1", "approve", first))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.slack.WaitAck(h.ctx(), env); err != nil {
		t.Fatal(err)
	}
	h.waitFake("the Feishu copies to show the Slack decision", func() bool {
		for _, m := range h.approvalCards(first) {
			if !strings.Contains(texts(m.Current), "approved by slack:"+slackOwner) {
				return false
			}
		}
		return true
	})

	// Denied on Feishu: the Slack copy shows it.
	second := ask("echo second")
	secondCard, _ := slackCard(second)
	var dm feishutest.Message
	for _, m := range h.approvalCards(second) {
		if m.ReceiveID == approver {
			dm = m
		}
	}
	ans := h.click(feishutest.CardAction{EventID: h.eventID(), Token: vtoken, AppID: h.appID, OperatorOpenID: approver,
		Value: button(t, dm.Content, "deny"), MessageID: dm.ID, ChatID: dm.ChatID}.JSON())
	if ans.Toast == nil || ans.Toast.Type != "success" || !strings.Contains(ans.Toast.Content, "denied") {
		t.Errorf("deny answered %+v", ans)
	}
	// Once decided, the Slack card has no buttons (nor their block ID):
	// follow the message itself.
	if err := h.slack.WaitFor(h.ctx(), func(*slacktest.Server) bool {
		m, ok := h.slack.Message(secondCard.Channel, secondCard.TS)
		return ok && strings.Contains(m.Text+string(m.BlocksJSON), "denied by feishu:"+approver)
	}); err != nil {
		m, _ := h.slack.Message(secondCard.Channel, secondCard.TS)
		t.Fatalf("the Slack copy never showed the Feishu decision: %v\n%+v", err, m)
	}
	h.waitStore("both requests to end", h.settled(2))
	rs := h.requests()
	states := map[string]requests.State{}
	for _, r := range rs {
		states[r.ID.String()] = r.State
	}
	if states[first] != requests.Done || states[second] != requests.Cancelled {
		t.Errorf("states %v: want %s done, %s cancelled", states, first, second)
	}
}
