package config

import "strings"

// guides are the steps of the platform guides (docs/slack.md,
// docs/feishu.md) where a platform key's value comes from: an error
// about the key says which step it is missing.
var guides = map[string]string{
	"slack.bot_token":           "the bot token, xoxb-…: see docs/slack.md §4",
	"slack.app_token":           "Socket Mode needs an app-level token, xapp-…, with connections:write: see docs/slack.md §3",
	"slack.signing_secret":      "events mode needs the app's signing secret: see docs/slack.md §8",
	"feishu.app_id":             "the app's App ID, cli_…: see docs/feishu.md §2",
	"feishu.app_secret":         "the app's App Secret: see docs/feishu.md §2",
	"feishu.verification_token": "the app's Verification Token: see docs/feishu.md §5",
	"feishu.encrypt_key":        "the app's Encrypt Key: see docs/feishu.md §5",
}

// guide is the guide's step for key (with or without its _file suffix),
// "" for a key no guide covers.
func guide(key string) string {
	return guides[strings.TrimSuffix(key, "_file")]
}
