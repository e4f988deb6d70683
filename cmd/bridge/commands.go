package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/roombridge/roombridge/agents/demo"
	"github.com/roombridge/roombridge/config"
)

// errUsage marks a command-line mistake.
var errUsage = errors.New("usage")

const usage = `usage: bridge <command> [flags]

  run [--config FILE]                 run the daemon (no config: console room, embedded store, demo agents)
  demo-agent                          the built-in demo agent (exec protocol on stdin/stdout)
  config check [--config FILE]        validate a configuration
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
  runner [--config FILE]              host agents on this machine, connected out to the bridge (docs/runners.md)
  runners add NAME | list | revoke NAME   register a runner (prints its token once), list them, revoke one

Commands that talk to a running daemon take --api URL and --config FILE.`

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command\n%s", errUsage, usage)
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
	case "runner":
		return runnerCmd(ctx, rest)
	case "runners":
		return runnersCmd(ctx, rest, os.Stdout)
	case "help", "-h", "--help":
		fmt.Println(usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q\n%s", errUsage, cmd, usage)
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
	var agentNames []string
	for n := range c.Agents {
		agentNames = append(agentNames, n)
	}
	fmt.Fprintf(out, "config ok: owner %s, %d room(s), agents %s\n", c.Owner, len(c.Rooms), strings.Join(slices.Sorted(slices.Values(agentNames)), ", "))
	return nil
}
