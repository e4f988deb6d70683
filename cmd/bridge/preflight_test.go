package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// preflightConfig is a config whose paths the cases of TestCheckRefusesWhatRunRefuses
// break one at a time: %[1]s is the agent's command, %[2]s data_dir.
const preflightConfig = `owner: local
owners: [console:you]
data_dir: %[2]s
http: {addr: "127.0.0.1:0", api_token_file: api.token}
console: {user: you}
rooms: [{name: console, channels: {console: console}, agents: [coder, builder]}]
agents:
  coder: {command: [%[1]s, demo-agent]}
  builder: {kind: runner, runner: laptop}
slack: {bot_token_file: bot.token, app_token_file: app.token}
`

// TestCheckRefusesWhatRunRefuses: `config check` refuses a config that
// `run` refuses, both naming the key: a missing or readable-by-others
// secret file, a data_dir that cannot be made, an agent command that does
// not exist or may not be run. A config without those faults passes, and
// check shows the runner-hosted agent as such.
func TestCheckRefusesWhatRunRefuses(t *testing.T) {
	for _, c := range []struct {
		name, key string
		breakIt   func(dir string) (command, dataDir string)
	}{
		{"secret file missing", "slack.bot_token_file", func(dir string) (string, string) {
			must(t, os.Remove(filepath.Join(dir, "bot.token")))
			return bridgeBin, "data"
		}},
		{"secret file mode 0644", "slack.app_token_file", func(dir string) (string, string) {
			must(t, os.Chmod(filepath.Join(dir, "app.token"), 0o644))
			return bridgeBin, "data"
		}},
		{"api token file mode 0644", "http.api_token_file", func(dir string) (string, string) {
			writeFile(t, filepath.Join(dir, "api.token"), "tok\n")
			must(t, os.Chmod(filepath.Join(dir, "api.token"), 0o644))
			return bridgeBin, "data"
		}},
		{"data_dir under a file", "data_dir", func(dir string) (string, string) {
			writeFile(t, filepath.Join(dir, "file"), "x")
			return bridgeBin, "file/data"
		}},
		{"agent command not found", "agents.coder.command", func(string) (string, string) {
			return "no-such-agent-program", "data"
		}},
		{"agent command not executable", "agents.coder.command", func(dir string) (string, string) {
			writeFile(t, filepath.Join(dir, "agent.sh"), "#!/bin/sh\n")
			return filepath.Join(dir, "agent.sh"), "data"
		}},
		{"no fault", "", func(string) (string, string) { return bridgeBin, "data" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "bot.token"), "xoxb-1\n")
			writeFile(t, filepath.Join(dir, "app.token"), "xapp-1\n")
			command, dataDir := c.breakIt(dir)
			path := filepath.Join(dir, "bridge.yaml")
			writeFile(t, path, fmt.Sprintf(preflightConfig, command, dataDir))
			var out bytes.Buffer
			checkErr := run(t.Context(), []string{"config", "check", "--config", path}, &out, io.Discard)
			if c.key == "" {
				if checkErr != nil || !strings.Contains(out.String(), "agent builder: on runner laptop\n") {
					t.Fatalf("config check: %v\n%s\nwant ok and the line %q", checkErr, out.String(), "agent builder: on runner laptop")
				}
				return
			}
			// A run that got past its checks stops at once: ctx is done.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			runErr := run(ctx, []string{"run", "--config", path}, io.Discard, io.Discard)
			for cmd, err := range map[string]error{"config check": checkErr, "run": runErr} {
				if err == nil || !strings.Contains(err.Error(), "config: "+c.key+": ") {
					t.Errorf("%s: %v, want an error about %s", cmd, err, c.key)
				}
			}
		})
	}
}

// TestCheckWarnsOfPortInUse: a port in use is a warning of config check
// (the bridge may be running), not an error.
func TestCheckWarnsOfPortInUse(t *testing.T) {
	dir, ln := busyPortDir(t)
	cfg := strings.Replace(fmt.Sprintf(preflightConfig, bridgeBin, "data"), "127.0.0.1:0", ln.Addr().String(), 1)
	writeFile(t, filepath.Join(dir, "bridge.yaml"), cfg)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"config", "check", "--config", filepath.Join(dir, "bridge.yaml")}, &out, io.Discard); err != nil {
		t.Fatalf("config check with the port in use: %v", err)
	}
	if want := "warning: http.addr: listen tcp " + ln.Addr().String() + ": bind: address already in use"; !strings.Contains(out.String(), want) {
		t.Errorf("config check output:\n%s\nwant %q", out.String(), want)
	}
}

// busyPortDir is a config directory with the Slack tokens of
// preflightConfig, and a listener that holds a port until the test ends.
func busyPortDir(t *testing.T) (string, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bot.token"), "xoxb-1\n")
	writeFile(t, filepath.Join(dir, "app.token"), "xapp-1\n")
	return dir, ln
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPortInUseMakesNothing: a run whose port is in use fails naming
// http.addr before it makes anything: no data_dir, no api.token, no
// bridge.db.
func TestPortInUseMakesNothing(t *testing.T) {
	dir, ln := busyPortDir(t)
	cfg := strings.Replace(fmt.Sprintf(preflightConfig, bridgeBin, "data"), "api_token_file: api.token", "addr: "+ln.Addr().String(), 1)
	cfg = strings.Replace(cfg, `addr: "127.0.0.1:0", `, "", 1)
	writeFile(t, filepath.Join(dir, "bridge.yaml"), cfg)
	err := run(t.Context(), []string{"run", "--config", filepath.Join(dir, "bridge.yaml")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "http.addr: ") {
		t.Errorf("run with the port in use: %v, want an error about http.addr", err)
	}
	for _, p := range []string{"data/api.token", "data/bridge.db", "data"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
}
