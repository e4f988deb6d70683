package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/slack"
)

// TestInit: init writes a config that loads, a 0600 token, the Slack
// manifest the connector's declarations make, the Feishu settings from the
// same source, and refuses to overwrite any of it.
func TestInit(t *testing.T) {
	// From a test binary init writes ./bin/bridge as the agents' command,
	// which config check wants to exist.
	t.Chdir(testBuildAt(t))
	dir := filepath.Join(t.TempDir(), "mybridge")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"init", "--dir", dir, "--slack", "--feishu"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "bridge.yaml")
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	if cfg.Owner == "" || len(cfg.Rooms) != 1 || len(cfg.Agents) != 2 || cfg.Slack != nil || cfg.Feishu != nil {
		t.Errorf("config %+v: want an owner, one room, the demo agents, Slack and Feishu commented out", cfg)
	}
	raw, _ := os.ReadFile(cfgPath)
	for _, key := range []string{"owner:", "# slack:", "bot_token_file:", "app_token_file:", "signing_secret_file:",
		"# feishu:", "app_id:", "app_secret_file:", "verification_token_file:", "encrypt_key_file:"} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("the config does not explain %s", key)
		}
	}
	st, err := os.Stat(cfg.HTTP.APITokenFile)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() < 32 {
		t.Errorf("api token %s: %v, mode %v: want a token of mode 0600", cfg.HTTP.APITokenFile, err, st)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "slack-app-manifest.json"))
	want, _ := slack.Manifest("roombridge", slack.ModeSocket, "")
	if !bytes.Equal(got, want) {
		t.Errorf("manifest %s, want %s", got, want)
	}
	for _, p := range feishu.Permissions {
		if !strings.Contains(out.String(), p.Name) {
			t.Errorf("init --feishu does not print the permission %s", p.Name)
		}
	}
	if !strings.Contains(out.String(), feishu.Event) || !strings.Contains(out.String(), feishu.Callback) ||
		!strings.Contains(out.String(), "config check --config "+cfgPath) {
		t.Errorf("output lacks the event, callback or next commands:\n%s", out.String())
	}
	if err := run(t.Context(), []string{"config", "check", "--config", cfgPath}, io.Discard, io.Discard); err != nil {
		t.Errorf("config check: %v", err)
	}
	if err := run(t.Context(), []string{"init", "--dir", dir}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Errorf("init over an existing config: %v", err)
	}
}

// TestExportFormat: the format follows -o's extension; a contradiction is refused.
func TestExportFormat(t *testing.T) {
	for _, c := range []struct{ flag, out, want string }{
		{"", "x.csv", "csv"}, {"", "x.jsonl", "jsonl"}, {"", "", "jsonl"}, {"", "x.txt", "jsonl"},
		{"csv", "", "csv"}, {"csv", "x.CSV", "csv"}, {"jsonl", "x.csv", "error"}, {"xml", "", "error"},
		{"CSV", "", "csv"}, {"Csv", "x.csv", "csv"}, {"JSONL", "x.jsonl", "jsonl"}, {"JSONL", "x.CSV", "error"}, {"", "x.JSONL", "jsonl"},
	} {
		f := c.flag
		err := exportFormat(&f, c.out)
		if got := map[bool]string{true: "error", false: f}[err != nil]; got != c.want {
			t.Errorf("--format %q -o %q: %s (%v), want %s", c.flag, c.out, got, err, c.want)
		}
	}
}
