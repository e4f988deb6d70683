package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/bolt"
)

// readme returns the repository's README.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeBlock returns the lines of the first indented code block after the
// heading, which must exist, before the next section or subsection.
func readmeBlock(t *testing.T, text, heading string) []string {
	t.Helper()
	_, after, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no heading %q", heading)
	}
	var block []string
	for _, l := range strings.Split(after, "\n") {
		switch {
		case strings.HasPrefix(l, "    "):
			block = append(block, strings.TrimPrefix(l, "    "))
		case len(block) > 0:
			return block
		case strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "### "):
			t.Fatalf("no code block under %q", heading)
		}
	}
	return block
}

// readmePicture is the README's ```text block of the console.
func readmePicture(t *testing.T, text string) []string {
	t.Helper()
	_, after, ok := strings.Cut(text, "```text\n")
	if !ok {
		t.Fatal("README has no ```text picture of the console")
	}
	pic, _, _ := strings.Cut(after, "```")
	return strings.Split(strings.TrimSuffix(pic, "\n"), "\n")
}

// consoleStep is one README console line: what must be on screen before it
// is typed (as a person would wait to see it; "" for nothing) and the answer
// it must get. %D stands for today's date, %U for the console user.
type consoleStep struct {
	line, before, answer string
}

var readmeConsole = []consoleStep{
	{"@coder say looking; progress 50 halfway; tool build 1s; echo all good", "", `^\* R%D-01 → coder \(approved\)$`},
	{"/as bob", "", `^\* you are now console:bob$`},
	{"@reviewer check R-01", "", `^\* R%D-02 → reviewer \(pending\)$`},
	{"approve R-02", "", `^! .*console:bob may not approve`},
	{"/as", "", `^\* you are now console:%U$`},
	{"approve R-02", "", `^\* R%D-02 approved$`},
	{"@coder sleep 1m; echo slept", "", `^\* R%D-03 → coder \(approved\)$`},
	{"cancel R-03", `R%D-03 \| status: running`, `^\* R%D-03 will stop at its next safe point$`},
	{"retry R-01", `R%D-01 \| status: done`, `^\* R%D-04 → coder \(approved\), retry of R%D-01$`},
	{"show R-01", "", `^\* R%D-01 · coder · done · asked by console:%U: say looking`},
	{"inbox", "", `^\* `},
	{"tasks", "", `^\* `},
	{"help", "", `^\* type @agent <ask>, web, inbox, tasks, dismiss <task>, .*/as <user>`},
}

// TestReadmeConsole types the README's console block, line by line in its
// order, into `bridge run` with no config (the real daemon, store, scheduler
// and demo agents) and checks each answer; then the README's CLI examples
// run against that daemon.
func TestReadmeConsole(t *testing.T) {
	text := readme(t)
	block := readmeBlock(t, text, "## Trying the console room")
	if len(block) != len(readmeConsole) {
		t.Fatalf("README console block has %d lines, the test knows %d: %q", len(block), len(readmeConsole), block)
	}
	for i, l := range block {
		if l != readmeConsole[i].line {
			t.Fatalf("README console line %d is %q, the test types %q", i+1, l, readmeConsole[i].line)
		}
	}

	dir := t.TempDir()
	p := startBridge(t, dir, []string{"USER=alice"}, "run", "--http", "127.0.0.1:0")
	p.api(filepath.Join(dir, ".roombridge"))
	day := time.Now().UTC().Format("20060102")
	expand := strings.NewReplacer("%D", day, "%U", "alice").Replace
	from := 0
	for _, s := range readmeConsole {
		if s.before != "" {
			p.waitLine(0, expand(s.before))
		}
		n := len(p.Lines())
		p.send(s.line)
		from = p.waitLine(max(n, from), expand(s.answer))
	}
	// The cancelled sleep ends as cancelled, not with its answer.
	p.waitLine(0, regexp.QuoteMeta("R"+day+"-03 | status: cancelled"))
	for _, l := range p.Lines() {
		if strings.Contains(l, "R"+day+"-03 | final: slept") {
			t.Errorf("the cancelled request answered: %q", l)
		}
	}
	// The README's picture of the first ask is what the console printed:
	// every line, the thread's lines in their order (its date replaced;
	// status lines between the first and the last may coalesce differently
	// from run to run; the answer and the thread's title may come in either
	// order).
	picture := readmePicture(t, text)
	if picture[0] != block[0] {
		t.Errorf("README picture asks %q, the console block %q", picture[0], block[0])
	}
	shown := p.Lines()
	for i := range shown {
		shown[i] = took.ReplaceAllString(shown[i], "(D)")
	}
	readmePictureComplete(t, picture, shown, day)
	last := 0
	for i, l := range picture[1:] {
		l = took.ReplaceAllString(strings.ReplaceAll(l, "20261201", day), "(D)")
		if !strings.Contains(l, " | ") {
			if !slices.Contains(shown, l) {
				t.Errorf("README picture line %q was not printed", l)
			}
			continue
		}
		if strings.Contains(l, "| status: ") && i != 2 && i != len(picture)-2 {
			continue
		}
		j := slices.Index(shown[last:], l)
		if j < 0 {
			t.Errorf("README picture line %q was not printed (in this order)", l)
			continue
		}
		last += j
	}
	// The README's CLI examples, run from the daemon's directory.
	cli := readmeBlock(t, text, "### CLI")
	for _, l := range cli {
		args, ok := strings.CutPrefix(l, "./bin/bridge ")
		if !ok {
			t.Fatalf("README CLI line %q does not run ./bin/bridge", l)
		}
		out, stderr, code := runCLI(t, dir, strings.Fields(args)...)
		if code != 0 {
			t.Errorf("%s: exit %d: %s%s", l, code, stderr, out)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "audit.csv"))
	if err != nil || strings.HasPrefix(string(csv), "{") || !strings.Contains(string(csv), "R"+day+"-01") {
		t.Errorf("audit.csv (%v) is not a CSV export of the requests: %.200q", err, csv)
	}
	readmeBackup(t, p, dir, text, day)
}

// took matches a duration the console shows (a tool's), which differs
// from run to run.
var took = regexp.MustCompile(`\([0-9.]+(ms|s)\)`)

// readmePictureComplete: every line the console printed in the first
// ask's thread, but for its status lines, is in the README's picture.
func readmePictureComplete(t *testing.T, picture, shown []string, day string) {
	t.Helper()
	id := "R" + day + "-01 | "
	var want []string
	for _, l := range picture {
		want = append(want, took.ReplaceAllString(strings.ReplaceAll(l, "20261201", day), "(D)"))
	}
	for _, l := range shown {
		if !strings.Contains(l, id) || strings.Contains(l, "| status: ") {
			continue
		}
		if !slices.Contains(want, took.ReplaceAllString(l, "(D)")) {
			t.Errorf("the console printed %q in the first ask's thread; the README's picture does not show it", l)
		}
	}
}

// readmeBackup runs the README's backup line while the bridge runs, and its
// restore lines once it stopped: the restored store holds its requests.
func readmeBackup(t *testing.T, p *proc, dir, text, day string) {
	t.Helper()
	const heading = "### Upgrades, backups and restores"
	run := func(block []string) {
		for _, l := range block {
			if from, to, ok := strings.Cut(strings.TrimPrefix(l, "mv "), " "); ok && strings.HasPrefix(l, "mv ") {
				if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				continue
			}
			args, ok := strings.CutPrefix(l, "./bin/bridge ")
			if !ok {
				t.Fatalf("README line %q does not run ./bin/bridge", l)
			}
			if out, stderr, code := runCLI(t, dir, strings.Fields(args)...); code != 0 {
				t.Errorf("%s: exit %d: %s%s", l, code, stderr, out)
			}
		}
	}
	run(readmeBlock(t, text, heading))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	run(readmeBlock(t, strings.SplitN(text, "a backup goes back into a data dir without a store:", 2)[1], ""))
	db, err := bolt.Open(filepath.Join(dir, ".roombridge", "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, err := requests.ParseID("R" + day + "-01")
	if err != nil {
		t.Fatal(err)
	}
	// The bridge with no config is owner "local".
	if r, err := requests.NewService(db, clock.Real{}, "local", nil).Get(context.Background(), id); err != nil || r.State != requests.Done {
		t.Errorf("restored %s: %v, %v; want done", id, r, err)
	}
}

// TestReadmeSetup runs the README's set-up block (build, init, config
// check) in a fresh directory, with the test's build as ./bin/bridge.
func TestReadmeSetup(t *testing.T) {
	block := readmeBlock(t, readme(t), "### Set-up")
	if len(block) != 1 || block[0] != "go build -o bin/bridge ./cmd/bridge" {
		t.Fatalf("README set-up block %q: want the one build line", block)
	}
	next := readmeBlock(t, strings.SplitN(readme(t), "\n### Set-up\n", 2)[1], "never overwrites a file; `--slack` also writes the Slack app manifest,\n`--feishu` prints what to enable in the Feishu app:")
	dir := testBuildAt(t)
	for _, l := range next {
		args, ok := strings.CutPrefix(l, "./bin/bridge ")
		if !ok {
			t.Fatalf("README set-up line %q does not run ./bin/bridge", l)
		}
		out, stderr, code := runCLI(t, dir, strings.Fields(args)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s%s", l, code, stderr, out)
		}
	}
}

// testBuildAt returns a new directory whose bin/bridge is the test's build
// (the README's `go build -o bin/bridge`): the agent command `bridge init`
// writes from a temporary build, which config check checks.
func testBuildAt(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bridgeBin, filepath.Join(dir, "bin", "bridge")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHelpNamesInvokedProgram: help and usage errors name the program as it
// was invoked, never a hard-coded "bridge" (which may be iproute2's).
func TestHelpNamesInvokedProgram(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "roombridge")
	if err := os.Symlink(bridgeBin, bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "help").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "usage: roombridge <command>") {
		t.Errorf("help starts %.60q, want the invoked name", out)
	}
	for _, flag := range []string{"--http ADDR", "--log-level LEVEL", "--log-format text|json", "init [--dir D]"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("help lacks %q", flag)
		}
	}
	cmd := exec.Command(bin, "bogus")
	stderr, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.HasPrefix(string(stderr), "roombridge: usage: unknown command") {
		t.Errorf("exit %d, stderr %.80q: want 2 and the invoked name", cmd.ProcessState.ExitCode(), stderr)
	}
}
