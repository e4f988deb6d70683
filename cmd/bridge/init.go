package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/roombridge/roombridge/connectors/feishu"
	"github.com/roombridge/roombridge/connectors/slack"
)

// initOptions are the flags of `init`.
type initOptions struct {
	dir           string
	slack, feishu bool
	publicURL     string
}

// initConfigDir is `bridge init [--dir D] [--slack] [--feishu] [--public-url URL]`:
// it asks nothing, writes a commented config into D with its token files
// (mode 0600), with --slack the Slack app manifest, with --feishu prints what
// to enable in the Feishu app, and prints the next commands. It never
// overwrites a file.
func initConfigDir(o initOptions, out io.Writer) error {
	cfgPath := filepath.Join(o.dir, "bridge.yaml")
	dataDir := filepath.Join(o.dir, ".roombridge")
	tokenPath := filepath.Join(dataDir, "api.token")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("init: api token: %w", err)
	}
	files := []struct {
		path string
		data []byte
		mode fs.FileMode
	}{
		{cfgPath, []byte(initConfig(consoleUserName(), dataDir, tokenPath, agentCommand())), 0o644},
		{tokenPath, []byte(hex.EncodeToString(tok) + "\n"), 0o600},
	}
	slackMode := slack.ModeSocket
	if o.publicURL != "" {
		slackMode = slack.ModeEvents
	}
	if o.slack {
		manifest, err := slack.Manifest("roombridge", slackMode, o.publicURL)
		if err != nil {
			return err
		}
		files = append(files, struct {
			path string
			data []byte
			mode fs.FileMode
		}{filepath.Join(o.dir, "slack-app-manifest.json"), manifest, 0o644})
	}
	for _, f := range files {
		if err := writeNew(f.path, f.data, f.mode); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", f.path)
	}
	prog := invokedPath()
	if o.slack {
		fmt.Fprintf(out, "\nSlack: api.slack.com/apps → Create New App → From a manifest → paste %s.\n"+
			"Install it, put the bot token (xoxb-…) into slack-bot.token and, in Socket Mode, an app-level token\n"+
			"with %s (xapp-…) into slack-app.token (both mode 0600), then uncomment the slack section.\n",
			filepath.Join(o.dir, "slack-app-manifest.json"), slack.AppTokenScope)
	}
	if o.feishu {
		fmt.Fprintf(out, "\n%s", feishu.Setup(map[bool]string{true: feishu.ModeCallback, false: feishu.ModeWS}[o.publicURL != ""], o.publicURL))
	}
	fmt.Fprintf(out, "\nNext:\n  %s config check --config %s\n  %s run --config %s\n", prog, cfgPath, prog, cfgPath)
	return nil
}

// writeNew writes data to path with mode, refusing to replace a file.
func writeNew(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("init: %s exists; not overwriting it (move it away or use --dir)", path)
	}
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("init: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("init: writing %s: %w", path, err)
	}
	return nil
}

// consoleUserName is who types in the terminal: $USER if it is a valid name.
func consoleUserName() string {
	u := os.Getenv("USER")
	if u == "" || strings.ContainsAny(u, " \t:") {
		return "you"
	}
	return u
}

// agentCommand is how the demo agents are run: this executable by its
// absolute path, unless it is a `go run` build (in the temporary directory
// or the build cache); then the README's build, bin/bridge, made absolute.
func agentCommand() string {
	exe, err := os.Executable()
	if err == nil && !transientBuild(exe) {
		return exe
	}
	if abs, err := filepath.Abs(filepath.Join("bin", "bridge")); err == nil {
		return abs
	}
	return "./bin/bridge"
}

// transientBuild reports whether path is a `go run` or `go test` build.
func transientBuild(path string) bool {
	return strings.HasPrefix(path, os.TempDir()) || strings.Contains(path, string(filepath.Separator)+"go-build")
}

// invokedPath is how to run this program again from here: as it was
// invoked, unless that is a `go run` build in the temporary directory.
func invokedPath() string {
	if len(os.Args) == 0 || transientBuild(os.Args[0]) {
		return "./bin/bridge"
	}
	return os.Args[0]
}

// initConfig is the commented configuration `bridge init` writes.
func initConfig(user, dataDir, tokenPath, agentExe string) string {
	return strings.NewReplacer("{user}", user, "{data_dir}", dataDir, "{token}", tokenPath,
		"{agent}", fmt.Sprintf("%q", agentExe)).Replace(initTemplate)
}

const initTemplate = `# roombridge configuration, written by "bridge init". Check it with
# "bridge config check --config FILE". ${ENV} is expanded anywhere; every
# secret key may instead be given as <key>_file (a file of mode 0600).

# Required: the name of this installation (in request IDs' uniqueness and the
# audit log). Any short word: your team or company.
owner: local

# Owner identities: their asks run at once, everyone else's wait for an
# approver. Users are surface:id (slack:U123, feishu:ou_abc, console:alice).
owners: [console:{user}]

# Where the embedded store, the API address (http.addr) and the token live.
data_dir: {data_dir}

# The HTTP API (and webhooks, /metrics, /mcp). Port 0 picks a free port; the
# address in use is written to <data_dir>/http.addr for the CLI.
http:
  addr: 127.0.0.1:8420
  api_token_file: {token}
  # TLS on this port (runners on other machines connect with https://):
  # tls_cert_file: /etc/roombridge/tls/bridge.pem
  # tls_key_file: /etc/roombridge/tls/bridge.key   # mode 0600

# The terminal room: who types there.
console:
  user: {user}

# Rooms: where people ask agents. channels binds a room to a Slack channel
# (slack: C0123), a Feishu chat (feishu: oc_abc) and/or the console
# (console: <room name>); agents: who may be asked (the first one when the
# ask names none); members: who may ask (empty: anyone in the channel);
# approvers: who may approve the asks of others.
rooms:
  - name: console
    channels: {console: console}
    agents: [coder, reviewer]
    approvers: [console:{user}]

# Agents: kind exec (speaks the bridge's exec protocol, e.g. the demo agent),
# claude (Claude Code) or codex (Codex CLI); command; workdir (where it runs).
agents:
  coder: {kind: exec, command: [{agent}, demo-agent], workdir: ./work/coder}
  reviewer: {kind: exec, command: [{agent}, demo-agent], workdir: ./work/reviewer}

# Slack (uncomment; "bridge init --slack" writes the app manifest):
# slack:
#   mode: socket                          # socket (Socket Mode, no public URL) or events (HTTP webhooks)
#   bot_token_file: ./slack-bot.token     # the bot token, xoxb-…
#   app_token_file: ./slack-app.token     # socket mode: an app-level token, xapp-…, with connections:write
#   signing_secret_file: ./slack.secret   # events mode: the app's signing secret
#   broadcast_final: false                # true: final answers also show in the channel
# and bind a room: channels: {slack: C0123} (invite the bot to the channel).

# Feishu (uncomment; "bridge init --feishu" prints what to enable in the app):
# feishu:
#   mode: ws                                  # ws (long connection) or callback (HTTP POST /feishu/events)
#   app_id: cli_a1b2c3                        # the self-built app's ID
#   app_secret_file: ./feishu-app.secret      # its secret
#   verification_token_file: ./feishu.token  # required in callback mode (and for card clicks, see the README)
#   encrypt_key_file: ./feishu.key            # optional: encrypted, signed callbacks
# and bind a room: channels: {feishu: oc_abc} (add the bot to the chat).

approvals: {ttl: 24h}                  # an unanswered approval expires after this long
log: {level: info, format: text}       # format text or json
shutdown: {grace: 30s}                 # how long a graceful stop may take
`
