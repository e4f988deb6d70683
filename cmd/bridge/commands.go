package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/config"
)

// errUsage marks a command-line mistake.
var errUsage = errors.New("usage")

// usageText is the help, with the name the program was invoked as.
func usageText() string {
	return strings.ReplaceAll(`usage: PROG <command> [flags]

  run [--config FILE] [--http ADDR] [--log-level L] [--log-format text|json]
                                      run the daemon (no config: console room, embedded store, demo agents);
                                      --http overrides http.addr (port 0: any free port), --log-level
                                      debug|info|warn|error and --log-format override the config's log
  init [--dir D] [--slack] [--feishu] write a commented config and its token files into D (default .);
                                      --slack also the Slack app manifest, --feishu the Feishu app's settings
  demo-agent                          the built-in demo agent (exec protocol on stdin/stdout)
  config check [--config FILE]        validate a configuration and say what it will do
  requests list [--state S] [--agent A]
  requests show ID
  cancel ID | retry ID
  approve ID | deny ID                approve or deny (R-07: a request; R-07.1: a permission its agent asked)
  answer ID TEXT...                   answer a question an agent asked (ask_user; R-07.q1)
  revoke USER                         cancel USER's pending and queued requests (surface:id); running ones finish
  tasks list [--room R]               running requests and background tasks (and failed ones not dismissed)
  tasks stop ID                       stop a background task (its request is told the work is incomplete)
  tasks dismiss ID                    clear a failed or interrupted task from the room's tasks
  audit export [--since T] [--until T] [--format jsonl|csv] [-o FILE]
                                      the format defaults to -o's extension (.csv, .jsonl), else jsonl
  runner [--config FILE]              host agents on this machine, connected out to the bridge (docs/runners.md)
  runners add NAME | list | revoke NAME   register a runner (prints its token once), list them, revoke one
  store backup FILE                   a consistent snapshot of the store (through the daemon while it runs)
  store restore FILE                  restore a backup into an empty data_dir or etcd prefix (no bridge running)
  store migrate [--dry-run]           bring a stopped single node's store to this binary's format; --dry-run says what would change

Commands that talk to a running daemon take --api URL and --config FILE.`, "PROG", progName())
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command\n%s", errUsage, usageText())
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runCmd(ctx, rest)
	case "demo-agent":
		// An agent process, not the daemon: SIGINT and SIGTERM stop it like
		// any program (main's onSignals would otherwise catch them and
		// the bridge's stop escalation would take until SIGKILL).
		signal.Reset(syscall.SIGINT, syscall.SIGTERM)
		if code := demo.Main(os.Stdin, os.Stdout); code != 0 {
			os.Exit(code)
		}
		return nil
	case "config":
		if len(rest) == 0 || rest[0] != "check" {
			return fmt.Errorf("%w: config check [--config FILE]", errUsage)
		}
		return configCheck(rest[1:], os.Stdout)
	case "requests":
		if len(rest) == 0 {
			return fmt.Errorf("%w: requests list|show", errUsage)
		}
		switch rest[0] {
		case "list":
			return requestsList(ctx, rest[1:], os.Stdout)
		case "show":
			return requestCmd(ctx, "requests show", "show", rest[1:], os.Stdout)
		}
		return fmt.Errorf("%w: requests list|show", errUsage)
	case "cancel", "retry":
		return requestCmd(ctx, cmd, cmd, rest, os.Stdout)
	case "approve", "deny":
		return approvalAction(ctx, cmd, rest, os.Stdout)
	case "answer":
		return answerQuestion(ctx, rest, os.Stdout)
	case "revoke":
		return revokeUser(ctx, rest, os.Stdout)
	case "tasks":
		switch {
		case len(rest) > 0 && rest[0] == "list":
			return tasksList(ctx, rest[1:], os.Stdout)
		case len(rest) > 0 && (rest[0] == "stop" || rest[0] == "dismiss"):
			return taskCommand(ctx, rest[0], rest[1:], os.Stdout)
		}
		return fmt.Errorf("%w: tasks list|stop|dismiss", errUsage)
	case "audit":
		if len(rest) == 0 || rest[0] != "export" {
			return fmt.Errorf("%w: audit export [flags]", errUsage)
		}
		return auditExport(ctx, rest[1:], os.Stdout, os.Stderr)
	case "init":
		return initCmd(rest, os.Stdout)
	case "runner":
		return runnerCmd(ctx, rest)
	case "runners":
		return runnersCmd(ctx, rest, os.Stdout)
	case "store":
		return storeCmd(ctx, rest, os.Stdout)
	case "help", "-h", "--help":
		fmt.Println(usageText())
		return nil
	}
	return fmt.Errorf("%w: unknown command %q\n%s", errUsage, cmd, usageText())
}

// newFlags returns a flag set whose errors are returned, not printed+exited.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	return nil
}

// loadConfig loads path, or the default configuration when path is "".
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding own executable: %w", err)
		}
		return config.Default(exe), nil
	}
	return config.Load(path)
}

func configCheck(args []string, out io.Writer) error {
	fs := newFlags("config check")
	path := fs.String("config", "", "config file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(*path)
	if err != nil {
		return err
	}
	describeConfig(out, c)
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
		a := c.Agents[n]
		fmt.Fprintf(out, "agent %s: %s, %s, workdir %s\n", n, a.Kind, strings.Join(a.Command, " "), orDefault(a.Workdir, "the current directory"))
	}
	if c.HA != nil {
		fmt.Fprintf(out, "store: etcd %s (prefix %s); HA: the instances elect a leader (lease %s)\n",
			strings.Join(c.HA.Etcd, ","), c.HA.Prefix, c.HA.LeaseTTL)
	} else {
		fmt.Fprintf(out, "store: bolt %s; single node\n", filepath.Join(c.DataDir, "bridge.db"))
	}
}
