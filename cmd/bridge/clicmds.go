package main

import (
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/roombridge/roombridge/agents/demo"
)

// commands are the program's commands, in the overview's order.
func commands() []*cobra.Command {
	return []*cobra.Command{
		runCommand(),
		initCommand(),
		demoAgentCommand(),
		group("config", "configurations", configCheckCommand()),
		group("requests", "requests", requestsListCommand(),
			requestCommand("show", "show ID", "a request: its state, agent, ask and result")),
		requestCommand("cancel", "cancel ID", "cancel a request (a running one stops at its next safe point)"),
		requestCommand("retry", "retry ID", "ask a finished request's ask again, as a new request"),
		approvalCommand("approve", "approve an approval (R-07: a request; R-07.1: a permission its agent asked)"),
		approvalCommand("deny", "deny an approval (R-07: a request; R-07.1: a permission its agent asked)"),
		answerCommand(),
		revokeCommand(),
		group("tasks", "running requests and background tasks", tasksListCommand(),
			taskCommand("stop", "stop a background task (its request is told the work is incomplete)"),
			taskCommand("dismiss", "clear a failed or interrupted task from the room's tasks")),
		group("audit", "the audit log", auditExportCommand()),
		runnerCommand(),
		group("runners", "the runners registered with the bridge", runnerAddCommand(), runnersListCommand(), runnerRevokeCommand()),
		group("store", "backups, restores and migrations of the store", storeBackupCommand(), storeRestoreCommand(), storeMigrateCommand()),
	}
}

// command is a command with its flags listed in the order they are added.
func command(use, short string, args cobra.PositionalArgs) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: args}
	c.Flags().SortFlags = false
	return c
}

// configFlag adds a --config flag (a YAML file) to c.
func configFlag(c *cobra.Command, def, usage string) *string {
	p := c.Flags().String("config", def, usage)
	_ = c.MarkFlagFilename("config", "yaml", "yml")
	return p
}

func runCommand() *cobra.Command {
	c := command("run", "run the daemon (no config: console room, embedded store, demo agents)", noArgs)
	var o runOptions
	c.Flags().StringVar(&o.config, "config", "", "the config `FILE` (default: ./bridge.yaml, else the built-in one: console room, embedded store, demo agents)")
	_ = c.MarkFlagFilename("config", "yaml", "yml")
	c.Flags().StringVar(&o.http, "http", "", "the `ADDR` the API listens on (overrides http.addr; port 0 picks a free port)")
	c.Flags().StringVar(&o.logLevel, "log-level", "", "log `LEVEL`: debug, info, warn or error (overrides log.level)")
	c.Flags().StringVar(&o.logFormat, "log-format", "", "log format, `text|json` (overrides log.format)")
	c.RunE = func(c *cobra.Command, _ []string) error { return runDaemon(c.Context(), o) }
	return c
}

func initCommand() *cobra.Command {
	c := command("init", "write a commented config and its token files into D (default .)", nArgs(0, 0, "no arguments (use --dir)"))
	var o initOptions
	c.Flags().StringVar(&o.dir, "dir", ".", "`D`irectory to write the config into")
	c.Flags().BoolVar(&o.slack, "slack", false, "also write the Slack app manifest (slack-app-manifest.json)")
	c.Flags().BoolVar(&o.feishu, "feishu", false, "also print what to enable in the Feishu app")
	c.Flags().StringVar(&o.publicURL, "public-url", "", "the bridge's public https `URL`, with --slack or --feishu: Slack in events mode, Feishu in callback mode and the web room's links use it (default: Socket Mode, the long connection)")
	_ = c.MarkFlagDirname("dir")
	c.RunE = func(c *cobra.Command, _ []string) error { return initConfigDir(o, c.OutOrStdout()) }
	return c
}

func demoAgentCommand() *cobra.Command {
	c := command("demo-agent", "the built-in demo agent (exec protocol on stdin/stdout)", noArgs)
	c.RunE = func(c *cobra.Command, _ []string) error {
		// An agent process, not the daemon: SIGINT and SIGTERM stop it like
		// any program (main's onSignals would otherwise catch them and
		// the bridge's stop escalation would take until SIGKILL).
		signal.Reset(syscall.SIGINT, syscall.SIGTERM)
		if code := demo.Main(c.InOrStdin(), c.OutOrStdout()); code != 0 {
			os.Exit(code)
		}
		return nil
	}
	return c
}

func configCheckCommand() *cobra.Command {
	c := command("check", "validate a configuration and say what it will do", noArgs)
	path := configFlag(c, "", "the config `FILE` (default: ./bridge.yaml, else the built-in one)")
	c.RunE = func(c *cobra.Command, _ []string) error { return configCheck(*path, c.OutOrStdout()) }
	return c
}

// apiOptions are the flags of a command that talks to the daemon.
type apiOptions struct {
	api    string // --api: the daemon's base URL
	config string // --config: the config file ("" the default one)
}

// apiFlags adds --api and --config to c.
func apiFlags(c *cobra.Command) *apiOptions {
	o := &apiOptions{}
	c.Flags().StringVar(&o.api, "api", "", "the daemon API's base `URL` (default: from the config and its data_dir)")
	c.Flags().StringVar(&o.config, "config", "", "the config `FILE` (default: ./bridge.yaml, else the built-in one, data in ./.roombridge)")
	_ = c.MarkFlagFilename("config", "yaml", "yml")
	for _, n := range []string{"api", "config"} {
		_ = c.Flags().SetAnnotation(n, sharedFlag, []string{"true"})
	}
	return o
}

func requestsListCommand() *cobra.Command {
	c := command("list", "requests, newest last", noArgs)
	var state, agent string
	c.Flags().StringVar(&state, "state", "", "only requests in this `STATE` (pending, queued, running, done, failed, cancelled, ...)")
	c.Flags().StringVar(&agent, "agent", "", "only requests of this `AGENT`")
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return requestsList(c.Context(), api, state, agent, c.OutOrStdout())
	}
	return c
}

// requestCommand is `requests show ID` (verb "show") and `cancel|retry ID`.
func requestCommand(verb, use, short string) *cobra.Command {
	c := command(use, short, nArgs(1, 1, "exactly one request ID"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return requestAction(c.Context(), api, verb, args[0], c.OutOrStdout())
	}
	return c
}

// approvalCommand is `approve ID` and `deny ID`.
func approvalCommand(verb, short string) *cobra.Command {
	c := command(verb+" ID", short, nArgs(1, 1, "exactly one approval ID (R-07, or R-07.1 for a permission asked during a run)"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return approvalAction(c.Context(), api, verb, args[0], c.OutOrStdout())
	}
	return c
}

func answerCommand() *cobra.Command {
	c := command("answer ID TEXT...", "answer a question an agent asked (ask_user; R-07.q1); -- before a TEXT that begins with -",
		nArgs(2, -1, "a question ID (R-07.q1) and the answer"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return answerQuestion(c.Context(), api, args[0], strings.Join(args[1:], " "), c.OutOrStdout())
	}
	return c
}

func revokeCommand() *cobra.Command {
	c := command("revoke USER", "cancel USER's pending and queued requests (surface:id); running ones finish",
		nArgs(1, 1, "exactly one user (surface:id, e.g. slack:U123)"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return revokeUser(c.Context(), api, args[0], c.OutOrStdout())
	}
	return c
}

func tasksListCommand() *cobra.Command {
	c := command("list", "running requests and background tasks (and failed ones not dismissed)", noArgs)
	room := c.Flags().String("room", "", "only this `ROOM` (default: every room of the config)")
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error { return tasksList(c.Context(), api, *room, c.OutOrStdout()) }
	return c
}

// taskCommand is `tasks stop ID` and `tasks dismiss ID`.
func taskCommand(verb, short string) *cobra.Command {
	c := command(verb+" ID", short, nArgs(1, 1, "exactly one task ID (T-3)"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return taskAction(c.Context(), api, verb, args[0], c.OutOrStdout())
	}
	return c
}

func auditExportCommand() *cobra.Command {
	c := command("export", "the audit log; the format defaults to -o's extension (.csv, .jsonl), else jsonl", noArgs)
	var o exportOptions
	c.Flags().StringVar(&o.since, "since", "", "from this `TIME` (RFC 3339 or YYYY-MM-DD), inclusive")
	c.Flags().StringVar(&o.until, "until", "", "to this `TIME`, exclusive")
	c.Flags().StringVar(&o.format, "format", "", "`jsonl|csv` (default: from -o's extension, else jsonl)")
	c.Flags().StringVarP(&o.output, "output", "o", "", "write to this `FILE` (created with mode 0600) instead of stdout")
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return auditExport(c.Context(), api, o, c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

func runnerCommand() *cobra.Command {
	c := command("runner", "host agents on this machine, connected out to the bridge (docs/design.md §6)", noArgs)
	path := configFlag(c, "runner.yaml", "the runner config `FILE`")
	c.RunE = func(c *cobra.Command, _ []string) error { return runRunner(c.Context(), *path) }
	return c
}

func runnerAddCommand() *cobra.Command {
	c := command("add NAME", "register a runner (prints its token once)", nArgs(1, 1, "exactly one runner name"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return runnerAdd(c.Context(), api, args[0], c.OutOrStdout())
	}
	return c
}

func runnersListCommand() *cobra.Command {
	c := command("list", "the runners, their state and last contact", noArgs)
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error { return runnersList(c.Context(), api, c.OutOrStdout()) }
	return c
}

func runnerRevokeCommand() *cobra.Command {
	c := command("revoke NAME", "revoke a runner: close its connection, refuse its token", nArgs(1, 1, "exactly one runner name"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return runnerRevoke(c.Context(), api, args[0], c.OutOrStdout())
	}
	return c
}

func storeBackupCommand() *cobra.Command {
	c := command("backup FILE", "a consistent snapshot of the store (through the daemon while it runs)", nArgs(1, 1, "one FILE"))
	api := apiFlags(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		return storeBackup(c.Context(), api, args[0], c.OutOrStdout())
	}
	return c
}

func storeRestoreCommand() *cobra.Command {
	c := command("restore FILE", "restore a backup into an empty data_dir or etcd prefix (no bridge running)", nArgs(1, 1, "one FILE"))
	path := configFlag(c, "", "the config `FILE` (default: ./bridge.yaml, else the built-in one, data in ./.roombridge)")
	c.RunE = func(c *cobra.Command, args []string) error {
		return storeRestore(c.Context(), *path, args[0], c.OutOrStdout())
	}
	return c
}

func storeMigrateCommand() *cobra.Command {
	c := command("migrate", "bring a stopped single node's store to this binary's format", noArgs)
	path := configFlag(c, "", "the config `FILE` (default: ./bridge.yaml, else the built-in one, data in ./.roombridge)")
	dry := c.Flags().Bool("dry-run", false, "say what would change; write nothing")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return storeMigrate(c.Context(), *path, *dry, c.OutOrStdout())
	}
	return c
}
