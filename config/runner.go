package config

import (
	"fmt"
	"net/url"
	"os"
	"time"
)

// Runners configures the bridge's side of runners (docs/design.md §6):
//
//	runners: {grace: 30s, heartbeat: 5s}
//	agents: {coder: {kind: runner, runner: laptop}}
type Runners struct {
	// Grace is how long a runner may be silent before its running turns
	// are marked interrupted (default 30s).
	Grace time.Duration `yaml:"grace"`
	// Heartbeat is the period of heartbeats both ways (default 5s).
	Heartbeat time.Duration `yaml:"heartbeat"`
}

// Default runner timings.
const (
	DefaultRunnerGrace     = 30 * time.Second
	DefaultRunnerHeartbeat = 5 * time.Second
)

// validateRunners checks the runner-hosted agents and sets the runners'
// defaults.
func (c *Config) validateRunners() error {
	if c.Runners.Grace == 0 {
		c.Runners.Grace = DefaultRunnerGrace
	}
	if c.Runners.Heartbeat == 0 {
		c.Runners.Heartbeat = DefaultRunnerHeartbeat
	}
	if c.Runners.Grace < 0 || c.Runners.Heartbeat < 0 {
		return keyErr("runners", "grace and heartbeat must not be negative")
	}
	for name, a := range c.Agents {
		k := "agents." + name
		switch {
		case a.Kind == "runner" && a.Runner == "":
			return keyErr(k+".runner", "required for kind runner: the name of the runner that hosts the agent")
		case a.Kind != "runner" && a.Runner != "":
			return keyErr(k+".runner", "only for kind runner")
		}
	}
	return nil
}

// RunnerHosts maps each runner-hosted agent to its runner.
func (c *Config) RunnerHosts() map[string]string {
	m := map[string]string{}
	for name, a := range c.Agents {
		if a.Kind == "runner" {
			m[name] = a.Runner
		}
	}
	return m
}

// RunnerFile is the configuration of `bridge runner`:
//
//	runner: {name: laptop, bridges: [https://bridge.example:7070], token_file: ~/.config/roombridge/runner.token}
//	agents: {coder: {kind: claude, workdir: ~/src/app}}
type RunnerFile struct {
	Runner RunnerSide       `yaml:"runner"`
	Agents map[string]Agent `yaml:"agents"`
	Log    Log              `yaml:"log"`
}

// RunnerSide is the runner's own section.
type RunnerSide struct {
	Name string `yaml:"name"`
	// Bridges are the bridges' URLs (http:// only to a loopback address
	// unless insecure; https:// verified with the system roots or CAFile).
	Bridges   []string `yaml:"bridges"`
	TokenFile string   `yaml:"token_file"`
	CAFile    string   `yaml:"ca_file"`
	Insecure  bool     `yaml:"insecure"`
}

// LoadRunner reads and validates a runner's configuration; its relative
// paths (runner.token_file, runner.ca_file, log.file, each agent's workdir
// and home) are resolved against its directory, like the bridge's.
func LoadRunner(path string) (*RunnerFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dir, err := absDir(path)
	if err != nil {
		return nil, err
	}
	f, file, err := decode[RunnerFile](b)
	if err != nil {
		return nil, err
	}
	f.Runner.TokenFile, f.Runner.CAFile = resolve(dir, f.Runner.TokenFile), resolve(dir, f.Runner.CAFile)
	f.Log.resolve(dir)
	resolveAgents(dir, f.Agents)
	return f, file.at(f.validate())
}

func (f *RunnerFile) validate() error {
	r := f.Runner
	if r.Name == "" {
		return keyErr("runner.name", "required")
	}
	if len(r.Bridges) == 0 {
		return keyErr("runner.bridges", "required: at least one bridge URL")
	}
	for i, u := range r.Bridges {
		if err := CheckBridgeURL(u, r.Insecure); err != nil {
			return keyErr(fmt.Sprintf("runner.bridges[%d]", i), "%v", err)
		}
	}
	if r.TokenFile == "" {
		return keyErr("runner.token_file", "required")
	}
	if len(f.Agents) == 0 {
		return keyErr("agents", "required: at least one agent")
	}
	for name, a := range f.Agents {
		switch a.Kind {
		case "", "exec", "claude", "codex":
		default:
			return keyErr("agents."+name+".kind", "unknown kind %q (want exec, claude or codex)", a.Kind)
		}
	}
	return nil
}

// CheckBridgeURL checks a bridge URL a runner connects to: its
// runner.bridges, and the leader a follower sends it to.
func CheckBridgeURL(u string, insecure bool) error {
	pu, err := url.Parse(u)
	switch {
	case err != nil || pu.Host == "" || (pu.Scheme != "http" && pu.Scheme != "https"):
		return fmt.Errorf("%q is not a URL (want https://host:port)", u)
	case pu.Scheme == "http" && !insecure && !loopback(pu.Hostname()):
		return fmt.Errorf("plaintext to %s crosses a network: use https:// (or runner.insecure: true)", pu.Hostname())
	}
	return nil
}

func loopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
