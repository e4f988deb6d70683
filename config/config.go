// Package config loads and validates the bridge's YAML configuration; every
// error names the exact key it is about.
package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Config is the whole configuration (docs/design.md §5).
type Config struct {
	Owner      string           `yaml:"owner"`
	Owners     []string         `yaml:"owners"`
	DataDir    string           `yaml:"data_dir"`
	HTTP       HTTP             `yaml:"http"`
	Slack      *Slack           `yaml:"slack"`
	Feishu     *Feishu          `yaml:"feishu"`
	Console    *Console         `yaml:"console"`
	Rooms      []Room           `yaml:"rooms"`
	Agents     map[string]Agent `yaml:"agents"`
	Approvals  Approvals        `yaml:"approvals"`
	Delegation Delegation       `yaml:"delegation"`
	HA         *HA              `yaml:"ha"`
	Requests   Requests         `yaml:"requests"`
	Log        Log              `yaml:"log"`
	Shutdown   Shutdown         `yaml:"shutdown"`
	Runners    Runners          `yaml:"runners"`
	Limits     Limits           `yaml:"limits"`
	Web        Web              `yaml:"web"`
	// SecretEnv names the environment variables the file expanded into a
	// secret key (${SLACK_BOT_TOKEN}); agent processes do not get them.
	SecretEnv []string `yaml:"-"`
	// File is the absolute path of the file the config was loaded from
	// ("": the built-in configuration, or one parsed from bytes); its
	// relative paths were resolved against its directory (paths.go).
	File string `yaml:"-"`
}

// HTTP is the API server.
type HTTP struct {
	Addr         string `yaml:"addr"`
	APIToken     string `yaml:"api_token"`
	APITokenFile string `yaml:"api_token_file"`
	// Timeouts and the per-client connection cap: config/server.go.
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	MaxConnsPerClient int           `yaml:"max_conns_per_client"`
	// TLS of the API port (both or neither): config/server.go.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
}

// Slack is the Slack connector.
type Slack struct {
	Mode              string `yaml:"mode"` // socket (default) or events
	BotToken          string `yaml:"bot_token"`
	BotTokenFile      string `yaml:"bot_token_file"`
	AppToken          string `yaml:"app_token"`
	AppTokenFile      string `yaml:"app_token_file"`
	SigningSecret     string `yaml:"signing_secret"`
	SigningSecretFile string `yaml:"signing_secret_file"`
	APIURL            string `yaml:"api_url"` // tests only
	BroadcastFinal    bool   `yaml:"broadcast_final"`
}

// Feishu is the Feishu connector.
type Feishu struct {
	Mode                  string `yaml:"mode"` // ws (default) or callback
	AppID                 string `yaml:"app_id"`
	AppSecret             string `yaml:"app_secret"`
	AppSecretFile         string `yaml:"app_secret_file"`
	VerificationToken     string `yaml:"verification_token"`
	VerificationTokenFile string `yaml:"verification_token_file"`
	EncryptKey            string `yaml:"encrypt_key"`
	EncryptKeyFile        string `yaml:"encrypt_key_file"`
	BaseURL               string `yaml:"base_url"` // tests only
}

// Console is the terminal room.
type Console struct {
	// User is who types in the terminal (console:<user>).
	User string `yaml:"user"`
}

// Agent is a named runtime.
type Agent struct {
	Kind               string        `yaml:"kind"` // exec, claude, codex
	Command            []string      `yaml:"command"`
	Workdir            string        `yaml:"workdir"`
	MaxBackgroundTasks int           `yaml:"max_background_tasks"`
	TurnTimeout        time.Duration `yaml:"turn_timeout"`
	// Home is a CLI agent's HOME (claude, codex), where its CLI keeps its
	// sessions and login (default: the bridge's HOME).
	Home string `yaml:"home"`
	// Runner names the runner that hosts the agent (kind runner).
	Runner string `yaml:"runner"`
}

// Approvals configures approval expiry.
type Approvals struct {
	TTL   time.Duration `yaml:"ttl"`
	Sweep string        `yaml:"sweep"`
	// Remind: config/approvals.go.
	Remind []time.Duration `yaml:"remind"`
}

// Delegation configures agents asking agents.
type Delegation struct {
	// RendezvousTimeout bounds how long an asking agent waits on another
	// agent's answer (0: no limit); when it fires the asker gets "timed out"
	// and the delegated request is cancelled.
	RendezvousTimeout time.Duration `yaml:"rendezvous_timeout"`
}

// HA configures leader election on etcd.
type HA struct {
	Etcd     []string      `yaml:"etcd"`
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	Prefix   string        `yaml:"prefix"`
	// AuditRetention is how long audit records stay in etcd (default 90
	// days); the leader prunes older ones hourly.
	AuditRetention time.Duration `yaml:"audit_retention"`
	// KeepAlive is how often the etcd client pings an idle connection
	// (default DefaultKeepAlive); etcd drops clients that ping more often
	// than its --grpc-keepalive-min-time (5s by default).
	KeepAlive time.Duration `yaml:"keepalive"`
	// AdvertiseURL is where runners reach this instance's API (default:
	// http.addr's scheme and address, the host name for an unspecified
	// host): the leader puts it in the election, and a follower sends a
	// runner there.
	AdvertiseURL string `yaml:"advertise_url"`
}

// Log configures logging.
type Log struct {
	Level string `yaml:"level"`
	// Format is text (default: slog's key=value lines) or json (one JSON
	// object per line).
	Format string `yaml:"format"`
	// File is where logs go: "stderr", or a file path. Default: stderr,
	// except for a console room at a terminal, where the room has the
	// terminal to itself: <data_dir>/bridge.log, with each warning also
	// shown there in one short line.
	File string `yaml:"file"`
}

// Shutdown configures a graceful stop (the first SIGTERM or SIGINT).
type Shutdown struct {
	// Grace bounds a graceful stop: running agent turns may reach a safe
	// point and the outbox is flushed within it; what still runs then is
	// interrupted, to be resumed by the next start (default 30s). Keep it
	// under the supervisor's own stop timeout (systemd TimeoutStopSec,
	// Kubernetes terminationGracePeriodSeconds).
	Grace time.Duration `yaml:"grace"`
}

// Error is a configuration error about one key.
type Error struct {
	Key string
	Msg string
	// Line is the line of the file the key is on (0: not known, or the
	// key is not in the file).
	Line int
}

func (e *Error) Error() string {
	msg := e.Msg
	if g := guide(e.Key); g != "" {
		msg += " (" + g + ")"
	}
	if e.Line > 0 {
		return fmt.Sprintf("config: %s: %s at line %d", e.Key, msg, e.Line)
	}
	return "config: " + e.Key + ": " + msg
}

func keyErr(key, format string, args ...any) error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Load reads, expands, checks and validates the file at path; its relative
// paths are resolved against its directory (paths.go).
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dir, err := absDir(path)
	if err != nil {
		return nil, err
	}
	c, err := parse(b, dir)
	if err != nil {
		return nil, err
	}
	c.File = filepath.Join(dir, filepath.Base(path))
	return c, nil
}

// Parse is Load from bytes: relative paths stay relative to the current
// directory.
func Parse(b []byte) (*Config, error) { return parse(b, "") }

// parse is Parse with the relative paths resolved against dir ("": left
// as they are).
func parse(b []byte, dir string) (*Config, error) {
	c, file, err := decode[Config](b)
	if err != nil {
		return nil, err
	}
	c.SecretEnv = file.secretEnv
	c.setDefaults()
	if dir != "" {
		c.resolvePaths(dir)
	}
	if err := c.Validate(); err != nil {
		return nil, file.at(err)
	}
	return c, nil
}

// Defaults applied to keys left out.
const (
	DefaultAddr       = "127.0.0.1:8420"
	DefaultDataDir    = "./.roombridge"
	DefaultTTL        = 24 * time.Hour
	DefaultSweep      = "@every 1m"
	DefaultMaxTasks   = 3
	DefaultLeaseTTL   = 5 * time.Second
	DefaultHAPrefix   = "/roombridge"
	DefaultRetention  = 90 * 24 * time.Hour
	DefaultKeepAlive  = 10 * time.Second
	minKeepAlive      = 5 * time.Second
	DefaultGrace      = 30 * time.Second
	DefaultLogFormat  = "text"
	defaultTokenFile  = "api.token"
	defaultConsoleWho = "you"
)

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.HTTP.Addr == "" {
		c.HTTP.Addr = DefaultAddr
	}
	if c.HTTP.APIToken == "" && c.HTTP.APITokenFile == "" {
		c.HTTP.APITokenFile = filepath.Join(c.DataDir, defaultTokenFile)
	}
	if c.Approvals.TTL == 0 {
		c.Approvals.TTL = DefaultTTL
	}
	if c.Approvals.Sweep == "" {
		c.Approvals.Sweep = DefaultSweep
	}
	c.setApprovalsDefaults()
	if c.Log.Format == "" {
		c.Log.Format = DefaultLogFormat
	}
	if c.Shutdown.Grace == 0 {
		c.Shutdown.Grace = DefaultGrace
	}
	c.Limits.setDefaults()
	if c.Console != nil && c.Console.User == "" {
		c.Console.User = defaultConsoleWho
	}
	for name, a := range c.Agents {
		if a.Kind == "" {
			a.Kind = "exec"
		}
		if a.MaxBackgroundTasks == 0 {
			a.MaxBackgroundTasks = DefaultMaxTasks
		}
		c.Agents[name] = a
	}
	if c.Slack != nil && c.Slack.Mode == "" {
		c.Slack.Mode = "socket"
	}
	if c.Feishu != nil && c.Feishu.Mode == "" {
		c.Feishu.Mode = "ws"
	}
	if c.HA != nil {
		if c.HA.LeaseTTL == 0 {
			c.HA.LeaseTTL = DefaultLeaseTTL
		}
		if c.HA.Prefix == "" {
			c.HA.Prefix = DefaultHAPrefix
		}
		if c.HA.AuditRetention == 0 {
			c.HA.AuditRetention = DefaultRetention
		}
		if c.HA.KeepAlive == 0 {
			c.HA.KeepAlive = DefaultKeepAlive
		}
	}
}

var userRE = regexp.MustCompile(`^(slack|feishu|console|api):[^\s:]+$`)

// Validate checks required keys and cross references.
func (c *Config) Validate() error {
	checks := []func() error{
		c.validateOwners, c.validateAgents, c.validateRooms, c.validateLimits, c.validateCertificate,
		c.validateRunners, c.validateWeb, c.validateAPIToken, c.validateSlack, c.validateFeishu,
		c.validateTimeouts, c.validateRemind, c.validateHA, c.validateLog, c.Limits.validate, c.validateShutdown,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateOwners checks owner (required) and owners (each a user).
func (c *Config) validateOwners() error {
	if c.Owner == "" {
		return keyErr("owner", "required")
	}
	for i, u := range c.Owners {
		if !userRE.MatchString(u) {
			return keyErr(fmt.Sprintf("owners[%d]", i), "%q is not a user (want surface:id, e.g. slack:U123)", u)
		}
	}
	return nil
}

// validateAgents checks that there is an agent and each one's kind,
// command and max_background_tasks.
func (c *Config) validateAgents() error {
	if len(c.Agents) == 0 {
		return keyErr("agents", "required: at least one agent")
	}
	for name, a := range c.Agents {
		k := "agents." + name
		switch a.Kind {
		case "exec", "claude", "codex", "runner":
		default:
			return keyErr(k+".kind", "unknown kind %q (want exec, claude, codex or runner)", a.Kind)
		}
		if a.Kind == "exec" && len(a.Command) == 0 {
			return keyErr(k+".command", "required for kind exec")
		}
		if a.MaxBackgroundTasks < 0 {
			return keyErr(k+".max_background_tasks", "must not be negative")
		}
	}
	return nil
}

// validateCertificate checks that http's TLS certificate, if any, loads.
func (c *Config) validateCertificate() error {
	_, err := c.HTTP.Certificate()
	return err
}

// validateAPIToken checks that http's API token is given at most one way.
func (c *Config) validateAPIToken() error {
	if c.HTTP.APIToken != "" && c.HTTP.APITokenFile != "" {
		return keyErr("http.api_token", "set either api_token or api_token_file, not both")
	}
	return nil
}

// validateSlack checks the slack section, if any: its bot token and its
// mode's secret.
func (c *Config) validateSlack() error {
	s := c.Slack
	if s == nil {
		return nil
	}
	if err := secretPair("slack.bot_token", s.BotToken, s.BotTokenFile, true); err != nil {
		return err
	}
	switch s.Mode {
	case "socket":
		return secretPair("slack.app_token", s.AppToken, s.AppTokenFile, true)
	case "events":
		return secretPair("slack.signing_secret", s.SigningSecret, s.SigningSecretFile, true)
	default:
		return keyErr("slack.mode", "unknown mode %q (want socket or events)", s.Mode)
	}
}

// validateFeishu checks the feishu section, if any: its app ID and secret
// and its mode's secret.
func (c *Config) validateFeishu() error {
	f := c.Feishu
	if f == nil {
		return nil
	}
	if f.AppID == "" {
		return keyErr("feishu.app_id", "required")
	}
	if err := secretPair("feishu.app_secret", f.AppSecret, f.AppSecretFile, true); err != nil {
		return err
	}
	switch f.Mode {
	case "ws":
		return nil
	case "callback":
		return secretPair("feishu.verification_token", f.VerificationToken, f.VerificationTokenFile, true)
	default:
		return keyErr("feishu.mode", "unknown mode %q (want ws or callback)", f.Mode)
	}
}

// validateTimeouts checks that the rendezvous timeout and the approvals'
// TTL are not negative.
func (c *Config) validateTimeouts() error {
	if c.Delegation.RendezvousTimeout < 0 {
		return keyErr("delegation.rendezvous_timeout", "must not be negative")
	}
	if c.Approvals.TTL < 0 {
		return keyErr("approvals.ttl", "must not be negative")
	}
	return nil
}

// validateHA checks the ha section, if any: endpoints, lease, keepalive,
// prefix, retention and advertised URL.
func (c *Config) validateHA() error {
	h := c.HA
	if h == nil {
		return nil
	}
	if len(h.Etcd) == 0 {
		return keyErr("ha.etcd", "required: at least one etcd endpoint")
	}
	if h.LeaseTTL < time.Second {
		return keyErr("ha.lease_ttl", "%v is too short (want at least 1s; etcd's minimum is 2s with default ticks)", h.LeaseTTL)
	}
	if h.KeepAlive != 0 && h.KeepAlive < minKeepAlive {
		return keyErr("ha.keepalive", "%v is too short (want at least %v: etcd drops clients that ping more often)", h.KeepAlive, minKeepAlive)
	}
	if !strings.HasPrefix(h.Prefix, "/") || strings.HasSuffix(h.Prefix, "/") {
		return keyErr("ha.prefix", "%q: want a path like /roombridge", h.Prefix)
	}
	if h.AuditRetention < 0 {
		return keyErr("ha.audit_retention", "must not be negative")
	}
	if h.AdvertiseURL != "" {
		if pu, err := url.Parse(h.AdvertiseURL); err != nil || pu.Host == "" || (pu.Scheme != "http" && pu.Scheme != "https") {
			return keyErr("ha.advertise_url", "%q is not a URL (want https://host:port)", h.AdvertiseURL)
		}
	}
	return nil
}

// validateLog checks log's level and format.
func (c *Config) validateLog() error {
	switch strings.ToLower(c.Log.Level) {
	case "", "debug", "info", "warn", "error":
	default:
		return keyErr("log.level", "unknown level %q (want debug, info, warn or error)", c.Log.Level)
	}
	return CheckLogFormat(c.Log.Format)
}

// validateShutdown checks that the shutdown grace is not negative.
func (c *Config) validateShutdown() error {
	if c.Shutdown.Grace < 0 {
		return keyErr("shutdown.grace", "%v: must be positive", c.Shutdown.Grace)
	}
	return nil
}

// CheckLogFormat checks a log format (log.format, or run's --log-format
// flag): "" (the default), text or json.
func CheckLogFormat(format string) error {
	switch format {
	case "", "text", "json":
		return nil
	}
	return keyErr("log.format", "unknown format %q (want text or json)", format)
}

// Default is the configuration used when no file is given: the console room,
// the embedded store and the demo agents, run as exe demo-agent.
func Default(exe string) *Config {
	c := &Config{
		Owner:   "local",
		Console: &Console{User: consoleUser()},
		Rooms: []Room{{
			Name: "console", Channels: map[string]string{"console": "console"}, Agents: []string{"coder", "reviewer"},
		}},
		Agents: map[string]Agent{
			"coder":    {Kind: "exec", Command: []string{exe, "demo-agent"}},
			"reviewer": {Kind: "exec", Command: []string{exe, "demo-agent"}},
		},
		Web: Web{Enabled: true},
	}
	c.Owners = []string{"console:" + c.Console.User}
	c.setDefaults()
	return c
}

func consoleUser() string {
	if u := os.Getenv("USER"); userRE.MatchString("console:" + u) {
		return u
	}
	return defaultConsoleWho
}
