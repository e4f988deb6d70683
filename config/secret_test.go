package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSecretFileMode(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("  s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := Secret("slack.bot_token", "", write("ok", 0o600)); err != nil || got != "s3cret" {
		t.Fatalf("0600 file: got %q, %v; want s3cret", got, err)
	}
	if got, err := Secret("slack.bot_token", "", write("ro", 0o400)); err != nil || got != "s3cret" {
		t.Fatalf("0400 file: got %q, %v; want s3cret", got, err)
	}
	if got, err := Secret("slack.bot_token", "inline", write("ignored", 0o644)); err != nil || got != "inline" {
		t.Fatalf("inline value: got %q, %v; want inline (the file is not read)", got, err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		p := write("open", mode)
		_, err := Secret("feishu.app_secret", "", p)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "feishu.app_secret_file" {
			t.Fatalf("mode %04o: err = %v; want a config error naming feishu.app_secret_file", mode, err)
		}
		if !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v does not say how to fix it", mode, err)
		}
	}
	if _, err := Secret("http.api_token", "", dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory as secret file: err = %v; want 'not a regular file'", err)
	}
	if _, err := Secret("http.api_token", "", filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "http.api_token_file") {
		t.Errorf("missing file: err = %v; want it to name http.api_token_file", err)
	}
}

// The variables expanded into secret keys are listed (once each), so that
// agents do not inherit them; others are not.
func TestSecretEnv(t *testing.T) {
	t.Setenv("RB_BOT", "xoxb-1")
	t.Setenv("RB_SIGN", "sig")
	t.Setenv("RB_OWNER", "acme")
	t.Setenv("RB_DIR", t.TempDir())
	c, err := Parse([]byte(`owner: ${RB_OWNER}
data_dir: ${RB_DIR}
slack: {mode: events, bot_token: "${RB_BOT}", signing_secret: "${RB_SIGN}${RB_BOT}"}
rooms:
  - {name: r, slack_channel: C1, agents: [coder]}
agents:
  coder: {kind: exec, command: [bridge, demo-agent]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"RB_BOT", "RB_SIGN"}; !slices.Equal(c.SecretEnv, want) {
		t.Fatalf("SecretEnv = %q, want %q", c.SecretEnv, want)
	}
}
