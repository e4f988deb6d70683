package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/config"
)

// defaultConfigFile is the config file used when --config is not given, if
// the current directory has one.
const defaultConfigFile = "bridge.yaml"

// loadConfig loads path; without one, ./bridge.yaml if there is one, else
// the built-in configuration (console room, embedded store, demo agents).
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		if _, err := os.Stat(defaultConfigFile); err == nil {
			return config.Load(defaultConfigFile)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config: %w", err)
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding own executable: %w", err)
		}
		return config.Default(exe), nil
	}
	return config.Load(path)
}

// configSource says where c came from: its file, or the built-in one.
func configSource(c *config.Config) string {
	return orDefault(c.File, "built-in (no --config, no ./"+defaultConfigFile+")")
}

// configCheck is `config check`: it loads the config at path and says what
// it will do. It refuses what `run` refuses (preflight) but a port in use,
// which it warns of (the bridge may be running).
func configCheck(path string, out io.Writer) error {
	c, err := loadConfig(path)
	if err != nil {
		return err
	}
	ln, portErr, err := preflight(c)
	if err != nil {
		return err
	}
	if ln != nil {
		_ = ln.Close()
	}
	describeConfig(out, c)
	if portErr != nil {
		fmt.Fprintf(out, "warning: %v (run would not start now; is a bridge running?)\n", portErr)
	}
	return nil
}

// describeConfig says what c will do: its surfaces, rooms, agents, store and
// HA, after the "config ok" line.
func describeConfig(out io.Writer, c *config.Config) {
	var agentNames []string
	for n := range c.Agents {
		agentNames = append(agentNames, n)
	}
	slices.Sort(agentNames)
	fmt.Fprintf(out, "config ok: owner %s, %d room(s), agents %s\n", c.Owner, len(c.Rooms), strings.Join(agentNames, ", "))
	fmt.Fprintf(out, "config: %s; relative paths are relative to %s\n", configSource(c),
		orDefault(c.Dir(), "the current directory"))
	var surfaces []string
	if c.Slack != nil {
		surfaces = append(surfaces, "slack ("+orDefault(c.Slack.Mode, "socket")+" mode)")
	}
	if c.Feishu != nil {
		surfaces = append(surfaces, "feishu ("+orDefault(c.Feishu.Mode, "ws")+" mode)")
	}
	if c.Console != nil {
		surfaces = append(surfaces, "console (as console:"+c.Console.User+")")
	}
	surfaces = append(surfaces, "api ("+c.HTTP.Scheme()+"://"+c.HTTP.Addr+", token "+orDefault(c.HTTP.APITokenFile, "inline")+")")
	fmt.Fprintf(out, "surfaces: %s\n", strings.Join(surfaces, ", "))
	fmt.Fprintf(out, "owners (asks run without approval): %s\n", orDefault(strings.Join(c.Owners, ", "), "none"))
	for _, r := range c.Rooms {
		var where []string
		bound := r.Bound()
		for _, surface := range slices.Sorted(maps.Keys(bound)) {
			where = append(where, surface+" "+bound[surface])
		}
		fmt.Fprintf(out, "room %s: %s; agents %s; members %s; approvers %s\n", r.Name, strings.Join(where, ", "),
			strings.Join(r.Agents, ", "), orDefault(strings.Join(r.Members, ", "), "anyone there"),
			orDefault(strings.Join(r.Approvers, ", "), "the owners"))
	}
	for _, n := range agentNames {
		fmt.Fprintf(out, "agent %s: %s\n", n, describeAgent(c, n))
	}
	if c.HA != nil {
		fmt.Fprintf(out, "store: etcd %s (prefix %s); HA: the instances elect a leader (lease %s)\n",
			strings.Join(c.HA.Etcd, ","), c.HA.Prefix, c.HA.LeaseTTL)
	} else {
		fmt.Fprintf(out, "store: bolt %s; single node\n", filepath.Join(c.DataDir, "bridge.db"))
	}
}

// describeAgent says how agent n runs: on its runner, or its kind, command
// and workdir.
func describeAgent(c *config.Config, n string) string {
	a := c.Agents[n]
	if a.Kind == "runner" {
		return "on runner " + a.Runner
	}
	d := fmt.Sprintf("%s, %s, workdir %s", a.Kind, orDefault(strings.Join(a.Command, " "), a.Program()), c.AgentWorkdir(n))
	if a.Home != "" {
		d += ", home " + a.Home
	}
	return d
}
