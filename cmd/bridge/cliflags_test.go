package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// cliRun is what one run of the CLI did.
type cliRun struct {
	out, err string
	code     int
}

// cliCase is one command of the flags-anywhere table: its arguments, flags
// that must take effect wherever they stand, and the check that they did.
type cliCase struct {
	path     string   // the command, "runners add"
	args     []string // its arguments
	flags    []string // flags (with their values) that must take effect
	has      []string // every flag it has (its help lists them)
	shared   bool     // it talks to the daemon: --api and --config are not on its overview line
	variadic bool     // its last argument takes any number of words: no argument is stray
	check    func(t *testing.T, cwd string, r cliRun)
}

// reachedDaemon: the command talked to the daemon of the --config given
// (it answered, or refused with an HTTP status), not to ./.roombridge's.
func reachedDaemon(t *testing.T, _ string, r cliRun) {
	t.Helper()
	if r.code != 0 && !regexp.MustCompile(`\(HTTP [45]\d\d\)`).MatchString(r.err) {
		t.Errorf("exit %d, stderr %q: want the daemon's answer or its HTTP error", r.code, r.err)
	}
}

// failsNaming: the command failed with an error naming path (of the flag's
// config), not ./.roombridge.
func failsNaming(path string) func(*testing.T, string, cliRun) {
	return func(t *testing.T, _ string, r cliRun) {
		t.Helper()
		if r.code != 1 || !strings.Contains(r.err, path) {
			t.Errorf("exit %d, stderr %q: want 1 and an error naming %s", r.code, r.err, path)
		}
	}
}

// cliCases is the table: every command of the program (TestCLIFlagsAnywhere
// checks it covers the tree). cfg is the running daemon's config, data its
// data_dir, backup a file to restore.
func cliCases(cfg, data, backup string) []cliCase {
	api := []string{"--api", "--config"}
	missing := filepath.Join(filepath.Dir(cfg), "missing.yaml")
	return []cliCase{
		{path: "run", flags: []string{"--config", missing, "--log-level", "debug"}, has: []string{"--config", "--http", "--log-level", "--log-format"},
			check: failsNaming(missing)},
		{path: "init", flags: []string{"--dir", "sub", "--slack"}, has: []string{"--dir", "--slack", "--feishu", "--public-url"},
			check: func(t *testing.T, cwd string, r cliRun) {
				for _, f := range []string{"bridge.yaml", "slack-app-manifest.json"} {
					if _, err := os.Stat(filepath.Join(cwd, "sub", f)); r.code != 0 || err != nil {
						t.Errorf("exit %d (%s), sub/%s: %v; want it written", r.code, r.err, f, err)
					}
				}
			}},
		{path: "demo-agent"}, // no flags, no arguments
		{path: "config check", flags: []string{"--config", cfg}, has: []string{"--config"},
			check: func(t *testing.T, _ string, r cliRun) {
				if r.code != 0 || !strings.Contains(r.out, "store: bolt "+filepath.Join(data, "bridge.db")) {
					t.Errorf("exit %d, %q %q: want the config's store described", r.code, r.out, r.err)
				}
			}},
		{path: "requests list", flags: []string{"--config", cfg, "--state", "done"}, has: append([]string{"--state", "--agent"}, api...),
			shared: true, check: reachedDaemon},
		{path: "requests show", args: []string{"R-01"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "cancel", args: []string{"R-01"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "retry", args: []string{"R-01"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "approve", args: []string{"R-01"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "deny", args: []string{"R-01"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "answer", args: []string{"R-01.q1", "blue"}, flags: []string{"--config", cfg}, has: api, shared: true, variadic: true, check: reachedDaemon},
		{path: "revoke", args: []string{"console:bob"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "tasks list", flags: []string{"--config", cfg, "--room", "main"}, has: append([]string{"--room"}, api...), shared: true, check: reachedDaemon},
		{path: "tasks stop", args: []string{"T-1"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "tasks dismiss", args: []string{"T-1"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "audit export", flags: []string{"--config", cfg, "-o", "audit.csv"}, has: append([]string{"--since", "--until", "--format", "--output"}, api...),
			shared: true, check: func(t *testing.T, cwd string, r cliRun) {
				b, err := os.ReadFile(filepath.Join(cwd, "audit.csv"))
				if r.code != 0 || !strings.HasPrefix(string(b), "seq,") {
					t.Errorf("exit %d (%s), audit.csv %.40q (%v): want a CSV export", r.code, r.err, b, err)
				}
			}},
		{path: "runner", flags: []string{"--config", missing}, has: []string{"--config"}, check: failsNaming(missing)},
		{path: "runners add", args: []string{"laptop"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "runners list", flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "runners revoke", args: []string{"laptop"}, flags: []string{"--config", cfg}, has: api, shared: true, check: reachedDaemon},
		{path: "store backup", args: []string{"b.jsonl"}, flags: []string{"--config", cfg}, has: api, shared: true,
			check: func(t *testing.T, cwd string, r cliRun) {
				if _, err := os.Stat(filepath.Join(cwd, "b.jsonl")); r.code != 0 || err != nil {
					t.Errorf("exit %d (%s), b.jsonl: %v; want the daemon's backup", r.code, r.err, err)
				}
			}},
		{path: "store restore", args: []string{backup}, flags: []string{"--config", cfg}, has: []string{"--config"},
			check: failsNaming(filepath.Join(data, "bridge.db"))}, // refused: the daemon holds it
		{path: "store migrate", flags: []string{"--config", cfg, "--dry-run"}, has: []string{"--config", "--dry-run"},
			check: failsNaming(filepath.Join(data, "bridge.db"))},
	}
}

// leafCommands are the paths of the program's runnable commands that are
// not cobra's own (help, completion).
func leafCommands(c *cobra.Command) []string {
	var paths []string
	for _, s := range c.Commands() {
		switch {
		case s.Name() == "help" || s.Name() == "completion":
		case s.HasSubCommands():
			paths = append(paths, leafCommands(s)...)
		default:
			paths = append(paths, cmdName(s))
		}
	}
	return paths
}

// TestCLIFlagsAnywhere runs the built binary for every command, from a
// directory with no ./.roombridge, with its flags before and after its
// arguments: the flags take effect either way (--config names a running
// daemon's config: the command reaches it, or fails naming that config's
// files). Then --help, -h and `help CMD` exit 0 with the command's flags on
// stdout, and an unknown flag and a stray argument exit 2 naming them;
// `completion bash` writes bash's script.
func TestCLIFlagsAnywhere(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, testConfig(dir))
	p := startBridge(t, dir, nil, "run", "--config", cfg)
	p.api(data)
	backup := filepath.Join(dir, "backup.jsonl")
	writeFile(t, backup, "")
	cases := cliCases(cfg, data, backup)
	var paths []string
	for _, c := range cases {
		paths = append(paths, c.path)
	}
	if tree := leafCommands(newRoot()); !slices.Equal(paths, tree) {
		t.Fatalf("the table has %q, the program %q", paths, tree)
	}
	overview, _, code := runCLI(t, dir, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	if out, errOut, code := runCLI(t, dir, "completion", "bash"); code != 0 || !strings.HasPrefix(out, "# bash completion V2 for bridge") {
		t.Errorf("completion bash: exit %d, %.60q %q: want the script", code, out, errOut)
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.path, " ", "_"), func(t *testing.T) {
			cmd := strings.Fields(c.path)
			if c.check != nil {
				forms := [][]string{slices.Concat(cmd, c.flags, c.args)}
				if len(c.args) > 0 {
					forms = append(forms, slices.Concat(cmd, c.args, c.flags))
				}
				for _, args := range forms {
					cwd := t.TempDir()
					out, errOut, code := runCLI(t, cwd, args...)
					t.Run(strings.Join(args, " "), func(t *testing.T) { c.check(t, cwd, cliRun{out, errOut, code}) })
					if _, err := os.Stat(filepath.Join(cwd, ".roombridge")); err == nil {
						t.Errorf("%q used ./.roombridge", args)
					}
				}
			}
			checkHelp(t, c, overview)
			checkUsageErrors(t, c)
		})
	}
}

// checkHelp: `CMD --help`, `CMD -h` and `help CMD` exit 0 and list the
// command's flags on stdout; the overview's line of the command names its
// own flags.
func checkHelp(t *testing.T, c cliCase, overview string) {
	t.Helper()
	cmd := strings.Fields(c.path)
	for _, args := range [][]string{append(cmd, "--help"), append(cmd, "-h"), append([]string{"help"}, cmd...)} {
		out, errOut, code := runCLI(t, t.TempDir(), args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "Usage:\n  bridge "+c.path) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q: want 0 and the usage on stdout", args, code, out, errOut)
		}
		for _, f := range c.has {
			if !strings.Contains(out, f+" ") {
				t.Errorf("%q does not list %s:\n%s", args, f, out)
			}
		}
	}
	line := ""
	for l := range strings.Lines(overview) {
		if strings.HasPrefix(l, "  "+c.path+" ") || l == "  "+c.path+"\n" {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatalf("help has no line for %s:\n%s", c.path, overview)
	}
	for _, f := range c.has {
		if !(c.shared && (f == "--api" || f == "--config")) && !strings.Contains(line, f) && !strings.Contains(line, "-o ") {
			t.Errorf("help's line %q does not name %s", line, f)
		}
	}
}

// checkUsageErrors: an unknown flag and a stray argument, before or after
// the arguments, exit 2 naming them (the unknown flag with the command's
// flags).
func checkUsageErrors(t *testing.T, c cliCase) {
	t.Helper()
	cmd := strings.Fields(c.path)
	for _, args := range [][]string{slices.Concat(cmd, c.args, []string{"--no-such-flag"}), slices.Concat(cmd, []string{"--no-such-flag"}, c.args)} {
		_, errOut, code := runCLI(t, t.TempDir(), args...)
		if code != 2 || !strings.Contains(errOut, "unknown flag: --no-such-flag") || !strings.Contains(errOut, "--help") {
			t.Errorf("%q: exit %d, stderr %q: want 2 naming the flag, with the command's flags", args, code, errOut)
		}
	}
	if c.variadic {
		return
	}
	args := slices.Concat(cmd, c.args, []string{"stray-arg"})
	if _, errOut, code := runCLI(t, t.TempDir(), args...); code != 2 || !strings.Contains(errOut, `"stray-arg"`) {
		t.Errorf("%q: exit %d, stderr %q: want 2 naming the stray argument", args, code, errOut)
	}
}
