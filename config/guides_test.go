package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsPointAtTheGuide: a missing or empty platform secret says which
// step of the platform's guide gives it.
func TestErrorsPointAtTheGuide(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bot.token"), []byte("xoxb-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(cfg, []byte(minimal+"slack: {bot_token_file: bot.token, app_token_file: app.token}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(cfg)
	if err == nil {
		err = c.Preflight()
	}
	if err == nil || !strings.Contains(err.Error(), "slack.app_token_file") ||
		!strings.Contains(err.Error(), "Socket Mode needs an app-level token, xapp-…, with connections:write: see docs/slack.md §3") {
		t.Errorf("a missing app token: %v; want the key and the guide's step", err)
	}
	for key, step := range map[string]string{"feishu.app_secret_file": "docs/feishu.md §2", "slack.signing_secret": "docs/slack.md §8"} {
		if msg := keyErr(key, "required").Error(); !strings.Contains(msg, step) {
			t.Errorf("%s: %q, want %s", key, msg, step)
		}
	}
}
