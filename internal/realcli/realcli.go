// Package realcli finds the real Claude Code and Codex CLIs for the tests
// that run them (against the fake model APIs of internal/fakemodel), and
// gives each the settings that keep it local: its model API on 127.0.0.1,
// a private home, no telemetry, no update checks. .ci/run installs the
// pinned versions (Versions) from the npm registry into CacheDir and
// exports their paths; under CI=true a missing binary fails the test, else
// it is skipped with a message.
package realcli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/roombridge/roombridge/internal/fakemodel"
)

// Versions are the CLI versions the tests are pinned to (npm packages).
var Versions = map[string]string{
	"claude": "@anthropic-ai/claude-code@2.1.328",
	"codex":  "@openai/codex@0.169.0",
}

// binEnv names the variable that gives each CLI's path.
var binEnv = map[string]string{"claude": "ROOMBRIDGE_CLAUDE_BIN", "codex": "ROOMBRIDGE_CODEX_BIN"}

// CacheDir is where .ci/run installs the CLIs (npm install --prefix).
func CacheDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "roombridge", "npm")
}

// Bin is the path of CLI name ("claude", "codex"): $ROOMBRIDGE_CLAUDE_BIN
// or $ROOMBRIDGE_CODEX_BIN, else the one in CacheDir. Missing, it fails
// the test under CI=true and skips it otherwise.
func Bin(t testing.TB, name string) string {
	t.Helper()
	path := os.Getenv(binEnv[name])
	if path == "" {
		path = filepath.Join(CacheDir(), "node_modules", ".bin", name)
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("the real %s CLI is not installed (%v): install it with `npm install --prefix %s %s` "+
			"(as .ci/run does) or set %s", name, err, CacheDir(), Versions[name], binEnv[name])
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// local is the environment that keeps both CLIs off the network but for
// their model API on 127.0.0.1.
var local = []string{"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	"HTTPS_PROXY=", "HTTP_PROXY=", "https_proxy=", "http_proxy="}

// ClaudeEnv is the environment of Claude Code talking to the fake
// Messages API at url, with retries bounded by retries (its own default is
// 10), and no telemetry, error reports, update checks or other traffic.
func ClaudeEnv(url string, retries int) []string {
	return append([]string{
		"ANTHROPIC_BASE_URL=" + url,
		"ANTHROPIC_API_KEY=sk-ant-fake",
		"ANTHROPIC_AUTH_TOKEN=",
		fmt.Sprintf("CLAUDE_CODE_MAX_RETRIES=%d", retries),
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1",
	}, local...)
}

// CodexKeyEnv is the variable that holds the fake provider's key
// (fakemodel.CodexConfig's env_key).
const CodexKeyEnv = "FAKE_OPENAI_API_KEY"

// CodexEnv is the environment of Codex with the fake provider's key.
func CodexEnv() []string {
	return append([]string{CodexKeyEnv + "=sk-fake", "OPENAI_API_KEY="}, local...)
}

// SetupCodex writes Codex's config.toml under home (home/.codex) so that
// it talks to the fake Responses API at url, with retries retries.
func SetupCodex(home, url string, retries int) error {
	dir := filepath.Join(home, ".codex")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.toml"), []byte(fakemodel.CodexConfig(url, retries)), 0o600)
}
