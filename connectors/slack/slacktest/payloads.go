package slacktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// SignRequest sets X-Slack-Request-Timestamp and X-Slack-Signature on req as Slack does:
// "v0=" + hex(HMAC-SHA256(secret, "v0:<unix ts>:<body>")).
func SignRequest(req *http.Request, body []byte, secret string, ts time.Time) {
	unix := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + unix + ":"))
	mac.Write(body)
	req.Header.Set("X-Slack-Request-Timestamp", unix)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
}

// URLVerification is the body of Slack's url_verification request for an Events API endpoint.
func URLVerification(challenge string) []byte {
	return mustJSON(map[string]any{"token": VerificationToken, "challenge": challenge, "type": "url_verification"})
}

// AppMentionEvent is a full event_callback for an app_mention of the bot by user in channel; ts is the
// mention's own ts (see Server.AddUserMessage), threadTS its parent's ts or "" when top-level.
func AppMentionEvent(eventID, channel, user, text, ts, threadTS string) []byte {
	return eventCallback(eventID, ts, messageFields("app_mention", channel, user, text, ts, threadTS))
}

// MessageEvent is a full event_callback for a plain message; channel_type is "im" for D… channels.
func MessageEvent(eventID, channel, user, text, ts, threadTS string) []byte {
	ev := messageFields("message", channel, user, text, ts, threadTS)
	ev["channel_type"] = "channel"
	if strings.HasPrefix(channel, "D") {
		ev["channel_type"] = "im"
	}
	return eventCallback(eventID, ts, ev)
}

func messageFields(typ, channel, user, text, ts, threadTS string) map[string]any {
	ev := map[string]any{"type": typ, "channel": channel, "user": user, "text": text, "ts": ts, "event_ts": ts,
		"team": TeamID}
	if threadTS != "" {
		ev["thread_ts"] = threadTS
	}
	return ev
}

func eventCallback(eventID, ts string, ev map[string]any) []byte {
	sec, _, _ := strings.Cut(ts, ".")
	t, _ := strconv.ParseInt(sec, 10, 64)
	return mustJSON(map[string]any{"token": VerificationToken, "team_id": TeamID, "api_app_id": AppID,
		"type": "event_callback", "event_id": eventID, "event_time": t, "event": ev,
		"authorizations": []any{map[string]any{"team_id": TeamID, "user_id": BotUserID, "is_bot": true}}})
}

// actionSeq makes action_ts and trigger_id unique per built payload, as they are per click in Slack.
var actionSeq atomic.Int64

// BlockActionsPayload is a block_actions interaction payload for user clicking button actionID (with
// value) in block blockID of message messageTS; threadTS is that message's thread parent or "".
// block_id is always a string, so slack-go classifies the action as a BlockAction. response_url
// points at hooks.slack.com and is not served by the fake.
func BlockActionsPayload(user, channel, messageTS, threadTS, blockID, actionID, value string) []byte {
	n := actionSeq.Add(1)
	actionTS := fmt.Sprintf("1700000000.%06d", n%1e6)
	container := map[string]any{"type": "message", "message_ts": messageTS, "channel_id": channel, "is_ephemeral": false}
	message := map[string]any{"type": "message", "ts": messageTS, "user": BotUserID, "bot_id": BotID}
	if threadTS != "" {
		container["thread_ts"], message["thread_ts"] = threadTS, threadTS
	}
	return mustJSON(map[string]any{
		"type": "block_actions", "token": VerificationToken, "api_app_id": AppID,
		"trigger_id": fmt.Sprintf("%d.slacktest", n), "response_url": "https://hooks.slack.com/actions/" + TeamID + "/0/slacktest",
		"user":      map[string]any{"id": user, "username": user, "team_id": TeamID},
		"team":      map[string]any{"id": TeamID, "domain": "slacktest"},
		"channel":   map[string]any{"id": channel},
		"container": container, "message": message, "state": map[string]any{"values": map[string]any{}},
		"actions": []any{map[string]any{"type": "button", "block_id": blockID, "action_id": actionID, "value": value,
			"action_ts": actionTS, "text": map[string]any{"type": "plain_text", "text": actionID}}},
	})
}

// InteractivityForm is the form body Slack POSTs to an interactivity URL: payload=<json>.
func InteractivityForm(payload []byte) url.Values { return url.Values{"payload": {string(payload)}} }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("slacktest: marshal payload: %v", err))
	}
	return b
}
