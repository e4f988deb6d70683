package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errUsage marks a command-line mistake (exit 2).
var errUsage = errors.New("usage")

// sharedFlag annotates the flags every command that talks to the daemon
// takes (--api, --config): the overview names them once, not on each line.
const sharedFlag = "roombridge_shared"

// Commands are listed in the order they are added (the overview's), not
// sorted. Set once: cobra reads it from every command tree.
func init() { cobra.EnableCommandSorting = false }

// run runs the command line args (without the program's name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot()
	// A non-nil slice: given nil, cobra would read os.Args.
	root.SetArgs(append([]string{}, args...))
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

// newRoot is the command tree (github.com/spf13/cobra): every command takes
// its flags before and after its arguments; -h, --help and `help COMMAND`
// print a command's help to stdout; `completion` writes a shell's
// completion script. Errors are returned, not printed: main prints them and
// exits 2 for usage errors (errUsage), else 1.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   progName(),
		Short: "gives AI agents a room in Slack, Feishu and the terminal",
		Args:  unknownCommand,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("%w: no command\n%s", errUsage, overview(c))
		},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if c == c.Root() {
			return usageError(c, "%v", err)
		}
		return usageError(c, "%s: %v", cmdName(c), err)
	})
	root.SetHelpCommand(helpCommand())
	commandHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c == c.Root() {
			fmt.Fprintln(c.OutOrStdout(), overview(c))
			return
		}
		commandHelp(c, args)
	})
	root.AddCommand(commands()...)
	return root
}

// unknownCommand is the root's argument check: any argument left is a
// command it does not know.
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unknown command %q\n%s", errUsage, args[0], overview(c))
	}
	return nil
}

// helpCommand is `help [COMMAND...]`: the overview, or a command's help.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND...]",
		Short: "the commands, or one command's arguments and flags",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return fmt.Errorf("%w: help: unknown command %q\n%s", errUsage, strings.Join(args, " "), overview(c.Root()))
			}
			return cmd.Help()
		},
	}
}

// group is a command made of subcommands only (`tasks list|stop|dismiss`):
// alone, or with a subcommand it does not have, it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short}
	g.AddCommand(subs...)
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.Name()
	}
	want := use + " " + strings.Join(names, "|")
	g.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError(c, "unknown command %q: %s", cmdName(c)+" "+args[0], want)
		}
		return nil
	}
	g.RunE = func(c *cobra.Command, _ []string) error { return usageError(c, "%s", want) }
	return g
}

// nArgs checks a command's arguments: at least min, at most max (max < 0:
// no limit); what says what they are ("exactly one request ID"). A missing
// or a stray argument is a usage error that names it.
func nArgs(min, max int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) < min:
			return usageError(c, "%s needs %s", cmdName(c), what)
		case max >= 0 && len(args) > max:
			return usageError(c, "%s: unexpected argument %q (it takes %s)", cmdName(c), args[max], what)
		}
		return nil
	}
}

// noArgs is nArgs for a command that takes none.
var noArgs = nArgs(0, 0, "no arguments")

// usageError is a usage error of c, followed by c's usage (its flags).
func usageError(c *cobra.Command, format string, args ...any) error {
	usage := overview(c)
	if c != c.Root() {
		usage = strings.TrimRight(c.UsageString(), "\n")
	}
	return fmt.Errorf("%w: %s\n%s", errUsage, fmt.Sprintf(format, args...), usage)
}

// cmdName is c's path without the program's name ("runners add").
func cmdName(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// overview is the program's help: every command with its arguments and
// flags, made from the command tree, so it names every flag there is.
func overview(root *cobra.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s <command> [flags]\n\n", root.Name())
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			switch {
			case !s.IsAvailableCommand() || s.Name() == "completion":
			case s.HasSubCommands():
				walk(s)
			default:
				fmt.Fprintf(&b, "  %s\n      %s\n", synopsis(s), strings.ReplaceAll(s.Short, "\n", "\n      "))
			}
		}
	}
	walk(root)
	fmt.Fprintf(&b, "  completion bash|zsh|fish|powershell\n      a shell completion script (`%s completion bash --help` says how to load it)\n", root.Name())
	fmt.Fprintf(&b, "\nCommands that talk to a running daemon also take --api URL and --config FILE.\n"+
		"Flags go before or after a command's arguments (-- ends the flags). `%[1]s help COMMAND`\n"+
		"or `%[1]s COMMAND --help` says more about a command and its flags.", root.Name())
	return b.String()
}

// synopsis is a command's line in the overview: its path, arguments and
// flags (those shared by the daemon's clients left out).
func synopsis(c *cobra.Command) string {
	parts := []string{cmdName(c)}
	if _, args, ok := strings.Cut(c.Use, " "); ok {
		parts = append(parts, args)
	}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Annotations[sharedFlag] != nil {
			return
		}
		name, _ := pflag.UnquoteUsage(f)
		flag := "--" + f.Name
		if f.Shorthand != "" {
			flag = "-" + f.Shorthand
		}
		if name != "" {
			flag += " " + name
		}
		parts = append(parts, "["+flag+"]")
	})
	return strings.Join(parts, " ")
}
