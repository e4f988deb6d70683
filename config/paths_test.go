package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPathsRelativeToFile: the relative paths of a config file (data_dir,
// its default, every *_file, log.file, each agent's workdir and home) are
// the file's directory's, not the current directory's; absolute ones and
// log.file "stderr" are kept.
func TestPathsRelativeToFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc")
	abs := filepath.Join(t.TempDir(), "abs")
	path := writeConfig(t, dir, "bridge.yaml", `owner: acme
data_dir: data
rooms: [{name: main, channels: {console: main}, agents: [coder, fixer]}]
agents:
  coder: {command: [demo], workdir: work/coder, home: ../home/coder}
  fixer: {command: [demo], workdir: `+abs+`}
slack: {bot_token_file: slack-bot.token, app_token_file: ./secrets/slack-app.token}
feishu: {app_id: cli_1, app_secret_file: feishu-app.secret}
log: {file: logs/bridge.log}
`)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ key, got, want string }{
		{"data_dir", c.DataDir, filepath.Join(dir, "data")},
		{"http.api_token_file (default)", c.HTTP.APITokenFile, filepath.Join(dir, "data", "api.token")},
		{"slack.bot_token_file", c.Slack.BotTokenFile, filepath.Join(dir, "slack-bot.token")},
		{"slack.app_token_file", c.Slack.AppTokenFile, filepath.Join(dir, "secrets", "slack-app.token")},
		{"feishu.app_secret_file", c.Feishu.AppSecretFile, filepath.Join(dir, "feishu-app.secret")},
		{"log.file", c.Log.File, filepath.Join(dir, "logs", "bridge.log")},
		{"agents.coder.workdir", c.Agents["coder"].Workdir, filepath.Join(dir, "work", "coder")},
		{"agents.coder.home", c.Agents["coder"].Home, filepath.Join(filepath.Dir(dir), "home", "coder")},
		{"agents.fixer.workdir (absolute)", c.Agents["fixer"].Workdir, abs},
		{"agents.fixer.home (unset)", c.Agents["fixer"].Home, ""},
		{"the file", c.File, path},
	} {
		if p.got != p.want {
			t.Errorf("%s: %q, want %q", p.key, p.got, p.want)
		}
	}

	// Without data_dir: ./.roombridge next to the file; log.file stderr
	// is not a path.
	c, err = Load(writeConfig(t, dir, "min.yaml", minimal+"log: {file: stderr}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, ".roombridge"); c.DataDir != want || c.HTTP.APITokenFile != filepath.Join(want, "api.token") || c.Log.File != "stderr" {
		t.Errorf("data_dir %q, api_token_file %q, log.file %q: want %s, its api.token, stderr", c.DataDir, c.HTTP.APITokenFile, c.Log.File, want)
	}

	// A runner's file alike.
	r, err := LoadRunner(writeConfig(t, dir, "runner.yaml", `runner: {name: laptop, bridges: ["http://127.0.0.1:1"], token_file: runner.token, ca_file: ca.pem}
agents: {coder: {kind: claude, workdir: src/app}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Runner.TokenFile != filepath.Join(dir, "runner.token") || r.Runner.CAFile != filepath.Join(dir, "ca.pem") ||
		r.Agents["coder"].Workdir != filepath.Join(dir, "src", "app") {
		t.Errorf("runner token_file %q, ca_file %q, workdir %q: want them in %s", r.Runner.TokenFile, r.Runner.CAFile, r.Agents["coder"].Workdir, dir)
	}
}

// writeConfig writes content to dir/name and returns its path.
func writeConfig(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnknownKindNamesRunner: the unknown-kind error lists every kind an
// agent of the bridge's config may have, runner too.
func TestUnknownKindNamesRunner(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(minimal, "{command: [demo]}", "{kind: bogus}", 1)))
	if err == nil || !strings.Contains(err.Error(), `config: agents.coder.kind: unknown kind "bogus" (want exec, claude, codex or runner)`) {
		t.Errorf("kind bogus: %v", err)
	}
}
