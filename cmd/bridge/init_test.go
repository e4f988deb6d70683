package main

import (
	"bytes"
	"io"
	"net/http"
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
	if !cfg.Web.Enabled || cfg.Web.PublicURL != "" {
		t.Errorf("web %+v: want the web room on, without a public URL", cfg.Web)
	}
	raw, _ := os.ReadFile(cfgPath)
	for _, key := range []string{"owner:", "# slack:", "bot_token_file:", "app_token_file:", "signing_secret_file:",
		"# feishu:", "app_id:", "app_secret_file:", "verification_token_file:", "encrypt_key_file:"} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("the config does not explain %s", key)
		}
	}
	// Its paths are the files init wrote, however the config is reached:
	// relative to the config's directory.
	if cfg.DataDir != filepath.Join(dir, ".roombridge") || cfg.HTTP.APITokenFile != filepath.Join(dir, ".roombridge", "api.token") {
		t.Errorf("data_dir %s, api_token_file %s: want %s's own .roombridge", cfg.DataDir, cfg.HTTP.APITokenFile, dir)
	}
	if !strings.Contains(string(raw0(t, dir)), "data_dir: .roombridge\n") {
		t.Errorf("the config names data_dir by an absolute or cwd-relative path: want .roombridge")
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
	for _, p := range append(feishu.Permissions, feishu.Permission{Name: "cardkit:card:write"}) {
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

// TestInitPublicURL: --public-url must be an https URL (http only on a
// loopback host) and come with --slack or --feishu; it puts the web room's
// links, the Slack manifest and the commented Slack and Feishu sections on
// it (events and callback mode), and says where the signing secret goes.
// A refused URL writes nothing.
func TestInitPublicURL(t *testing.T) {
	for _, c := range []struct{ args, refusal string }{
		{"--slack --public-url example.test", `--public-url "example.test": not an absolute URL`},
		{"--feishu --public-url http://bridge.example.com", "need https"},
		{"--slack --public-url https://bridge.example.com/?x=1", "no user, query or fragment"},
		{"--slack --public-url https://user@bridge.example.com", "no user, query or fragment"},
		{"--public-url https://bridge.example.com", "use it with --slack and/or --feishu"},
	} {
		dir := t.TempDir()
		err := run(t.Context(), append([]string{"init", "--dir", dir}, strings.Fields(c.args)...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.refusal) {
			t.Errorf("init %s: %v, want %q", c.args, err, c.refusal)
		}
		if _, err := os.Stat(filepath.Join(dir, "bridge.yaml")); err == nil {
			t.Errorf("init %s wrote a config", c.args)
		}
	}

	for _, c := range []struct{ url, want string }{
		{"https://bridge.example.com/", "https://bridge.example.com"},
		{"http://127.0.0.1:8420", "http://127.0.0.1:8420"},
		{"http://localhost:8420/bridge", "http://localhost:8420/bridge"},
	} {
		dir := t.TempDir()
		var out bytes.Buffer
		if err := run(t.Context(), []string{"init", "--dir", dir, "--slack", "--feishu", "--public-url", c.url}, &out, io.Discard); err != nil {
			t.Errorf("init --public-url %s: %v", c.url, err)
			continue
		}
		cfg, err := config.Load(filepath.Join(dir, "bridge.yaml"))
		if err != nil {
			t.Fatalf("the written config does not load: %v", err)
		}
		if !cfg.Web.Enabled || cfg.Web.PublicURL != c.want {
			t.Errorf("--public-url %s: web %+v, want on at %s", c.url, cfg.Web, c.want)
		}
		raw, _ := os.ReadFile(filepath.Join(dir, "bridge.yaml"))
		for _, want := range []string{"#   mode: events", "#   signing_secret_file: ./slack.secret", c.want + "/slack/events",
			"#   mode: callback", c.want + "/feishu/events"} {
			if !strings.Contains(string(raw), want) {
				t.Errorf("--public-url %s: the config lacks %q", c.url, want)
			}
		}
		got, _ := os.ReadFile(filepath.Join(dir, "slack-app-manifest.json"))
		want, _ := slack.Manifest("roombridge", slack.ModeEvents, c.want)
		if !bytes.Equal(got, want) {
			t.Errorf("--public-url %s: manifest %s, want %s", c.url, got, want)
		}
		for _, want := range []string{"signing secret", "slack.secret", c.want + "/slack/events", c.want + "/feishu/events"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("--public-url %s: the output lacks %q:\n%s", c.url, want, out.String())
			}
		}
		if strings.Contains(out.String(), "slack-app.token") {
			t.Errorf("--public-url %s: the output asks for an app-level token, which events mode does not use:\n%s", c.url, out.String())
		}
	}
}

// TestInitWorkspaceRuns: init run from another folder by a binary under
// the temporary directory (not a `go run` build: the tests' own build of
// the bridge) writes a config whose demo agents are that binary; the bridge
// started on it answers an ask in the console and serves the web room.
func TestInitWorkspaceRuns(t *testing.T) {
	elsewhere := t.TempDir()
	ws := filepath.Join(t.TempDir(), "ws")
	if out, stderr, code := runCLI(t, elsewhere, "init", "--dir", ws); code != 0 {
		t.Fatalf("init: exit %d: %s%s", code, stderr, out)
	}
	cfg, err := config.Load(filepath.Join(ws, "bridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range cfg.Agents {
		if len(a.Command) == 0 || a.Command[0] != bridgeBin {
			t.Errorf("agent %s runs %q, want the bridge that wrote the config, %s", name, a.Command, bridgeBin)
		}
	}
	p := startBridge(t, elsewhere, nil, "run", "--config", filepath.Join(ws, "bridge.yaml"), "--http", "127.0.0.1:0")
	base, _ := p.api(cfg.DataDir)
	p.send("@coder echo the workspace runs")
	p.waitLine(0, `\| final: the workspace runs$`)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET / (the web room): %s, want 200 OK", resp.Status)
	}
}

// TestTransientBuild: only the go command's builds count as `go run` ones.
func TestTransientBuild(t *testing.T) {
	t.Setenv("GOCACHE", "/home/u/gocache")
	for path, want := range map[string]bool{
		"/tmp/go-build529431411/b001/exe/bridge":     true, // go run, work directory
		"/root/.cache/go-build/4b/4be50766-d/bridge": true, // go run, build cache
		"/home/u/gocache/4b/4be50766-d/bridge":       true, // go run, $GOCACHE
		"/tmp/bridge-bin123/bridge":                  false,
		"/tmp/x/bin/bridge":                          false,
		"/home/u/gocache-other/bridge":               false,
		"/usr/local/bin/bridge":                      false,
	} {
		if got := transientBuild(path); got != want {
			t.Errorf("transientBuild(%s) = %v, want %v", path, got, want)
		}
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

// raw0 is the config init wrote into dir.
func raw0(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "bridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
