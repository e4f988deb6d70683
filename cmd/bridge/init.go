package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
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
	if o.publicURL != "" {
		if !o.slack && !o.feishu {
			return errors.New("init: --public-url is where Slack (events mode) and Feishu (callback mode) reach the bridge: use it with --slack and/or --feishu")
		}
		u, err := checkPublicURL(o.publicURL)
		if err != nil {
			return err
		}
		o.publicURL = u
	}
	cfgPath := filepath.Join(o.dir, "bridge.yaml")
	dataDir := filepath.Join(o.dir, ".roombridge")
	tokenPath := filepath.Join(dataDir, "api.token")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	agent := agentCommand()
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("init: api token: %w", err)
	}
	files := []struct {
		path string
		data []byte
		mode fs.FileMode
	}{
		// The config names its paths relative to itself (config.Load
		// resolves them against its directory), wherever init ran.
		{cfgPath, []byte(initConfig(consoleUserName(), ".roombridge", filepath.Join(".roombridge", "api.token"), agent, o.publicURL)), 0o644},
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
		fmt.Fprintf(out, "\nSlack (step by step: docs/slack.md): api.slack.com/apps → Create New App → From a manifest → paste %s.\n"+
			"Install it and put the bot token (xoxb-…) into slack-bot.token (mode 0600).\n",
			filepath.Join(o.dir, "slack-app-manifest.json"))
		if o.publicURL != "" {
			fmt.Fprintf(out, "Events mode: put the app's signing secret (Basic Information → App Credentials → Signing Secret)\n"+
				"into slack.secret (mode 0600); Slack posts to %s/slack/events and %s/slack/interactivity.\n",
				o.publicURL, o.publicURL)
		} else {
			fmt.Fprintf(out, "Socket Mode: generate an app-level token with %s (Basic Information → App-Level Tokens)\n"+
				"and put it (xapp-…) into slack-app.token (mode 0600).\n", slack.AppTokenScope)
		}
		fmt.Fprintf(out, "Then uncomment the slack section of %s, bind a room to the channel's ID and put your\n"+
			"member ID (slack:U…) into owners.\n", cfgPath)
	}
	if o.feishu {
		fmt.Fprintf(out, "\nFeishu (step by step: docs/feishu.md):\n%s", feishu.Setup(map[bool]string{true: feishu.ModeCallback, false: feishu.ModeWS}[o.publicURL != ""], o.publicURL))
	}
	if _, err := os.Stat(agent); err != nil {
		fmt.Fprintf(out, "\nThe demo agents run %s, which does not exist yet: build it with\n  go build -o %s ./cmd/bridge\n", agent, agent)
	}
	fmt.Fprintf(out, "\nNext:\n  %s config check --config %s\n  %s run --config %s\n", prog, cfgPath, prog, cfgPath)
	return nil
}

// checkPublicURL checks --public-url: an absolute https URL (http only on
// a loopback host, for trying it out) without query or fragment. It
// returns it without a trailing slash.
func checkPublicURL(raw string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("init: --public-url %q: %s (want the bridge's public address, e.g. https://bridge.example.com)", raw, why)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", bad(err.Error())
	case u.Scheme == "" || u.Host == "":
		return "", bad("not an absolute URL")
	case u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname())):
		return "", bad("Slack and Feishu need https (http only on a loopback address)")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", bad("no user, query or fragment")
	}
	return strings.TrimSuffix(raw, "/"), nil
}

// loopbackHost reports whether host is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

// transientBuild reports whether path is a `go run` or `go test` build:
// one in a go-build* directory (the go command's work directory under
// $GOTMPDIR or the temporary directory, or the default build cache, where
// `go run` keeps executables since Go 1.24) or under $GOCACHE. Any other
// binary, e.g. one built into /tmp/x/bin, is kept.
func transientBuild(path string) bool {
	for _, dir := range strings.Split(filepath.Dir(path), string(filepath.Separator)) {
		if strings.HasPrefix(dir, "go-build") {
			return true
		}
	}
	if c := os.Getenv("GOCACHE"); c != "" && c != "off" {
		if rel, err := filepath.Rel(c, path); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// invokedPath is how to run this program again from here: as it was
// invoked, unless that is a `go run` build in the temporary directory.
func invokedPath() string {
	if len(os.Args) == 0 || transientBuild(os.Args[0]) {
		return "./bin/bridge"
	}
	return os.Args[0]
}

// initConfig is the commented configuration `bridge init` writes. With a
// public URL the web room's links are made from it, and the Slack and Feishu
// sections are in events and callback mode (webhooks under that URL);
// without, in Socket Mode and on the long connection.
func initConfig(user, dataDir, tokenPath, agentExe, publicURL string) string {
	web, slackSection, feishuSection := webLocal, slackSocket, feishuWS
	if publicURL != "" {
		web = "  public_url: " + publicURL + "  # where people reach it: sign-in links, the cards' \"Open\" links\n"
		slackSection = strings.ReplaceAll(slackEvents, "{public_url}", publicURL)
		feishuSection = strings.ReplaceAll(feishuCallback, "{public_url}", publicURL)
	}
	return strings.NewReplacer("{user}", user, "{data_dir}", dataDir, "{token}", tokenPath,
		"{agent}", fmt.Sprintf("%q", agentExe), "{web}", web, "{slack}", slackSection,
		"{feishu}", feishuSection).Replace(initTemplate)
}

const webLocal = `  # public_url: https://bridge.example.com  # where people reach it: sign-in links, the cards' "Open" links
`

const slackSocket = `# Slack (uncomment; "bridge init --slack" writes the app manifest; step by
# step: docs/slack.md in the roombridge repository):
# slack:
#   mode: socket                          # socket (Socket Mode, no public URL) or events (HTTP webhooks)
#   bot_token_file: ./slack-bot.token     # the bot token, xoxb-…
#   app_token_file: ./slack-app.token     # socket mode: an app-level token, xapp-…, with connections:write
#   signing_secret_file: ./slack.secret   # events mode: the app's signing secret
#   broadcast_final: false                # true: final answers also show in the channel
`

const slackEvents = `# Slack (uncomment; "bridge init --slack" writes the app manifest; step by
# step: docs/slack.md in the roombridge repository). Events mode: Slack posts
# to {public_url}/slack/events and /slack/interactivity.
# slack:
#   mode: events                          # events (HTTP webhooks) or socket (Socket Mode, no public URL)
#   bot_token_file: ./slack-bot.token     # the bot token, xoxb-…
#   signing_secret_file: ./slack.secret   # the app's signing secret (Basic Information → App Credentials)
#   # app_token_file: ./slack-app.token   # socket mode only: an app-level token, xapp-…, with connections:write
#   broadcast_final: false                # true: final answers also show in the channel
`

const feishuWS = `# Feishu (uncomment; "bridge init --feishu" prints what to enable in the app;
# step by step: docs/feishu.md in the roombridge repository):
# feishu:
#   mode: ws                                  # ws (long connection) or callback (HTTP POST /feishu/events)
#   app_id: cli_a1b2c3                        # the self-built app's ID
#   app_secret_file: ./feishu-app.secret      # its secret
#   verification_token_file: ./feishu.token  # required in callback mode (and for card clicks, see the README)
#   encrypt_key_file: ./feishu.key            # optional: encrypted, signed callbacks
`

const feishuCallback = `# Feishu (uncomment; "bridge init --feishu" prints what to enable in the app;
# step by step: docs/feishu.md in the roombridge repository). Callback mode:
# Feishu posts events and card clicks to {public_url}/feishu/events.
# feishu:
#   mode: callback                            # callback (HTTP POST /feishu/events) or ws (long connection)
#   app_id: cli_a1b2c3                        # the self-built app's ID
#   app_secret_file: ./feishu-app.secret      # its secret
#   verification_token_file: ./feishu.token  # required: the app's verification token
#   encrypt_key_file: ./feishu.key            # optional: encrypted, signed callbacks
`

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

# The web room, served at / on the HTTP address above: type "web" in a room
# for a one-time sign-in link (the API token also signs in).
web:
  enabled: true
{web}
{slack}# and bind a room: channels: {slack: C0123} (invite the bot to the channel),
# with your member ID in owners and approvers: slack:U0123.

{feishu}# and bind a room: channels: {feishu: oc_abc} (add the bot to the chat),
# with your open_id in owners and approvers: feishu:ou_abc.

approvals: {ttl: 24h}                  # an unanswered approval expires after this long
log: {level: info, format: text}       # format text or json
shutdown: {grace: 30s}                 # how long a graceful stop may take
`
