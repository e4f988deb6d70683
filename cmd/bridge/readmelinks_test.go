package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// mdLink is a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestReadmeLinks: every relative link in the README and docs/ resolves to
// a file of the repository and, with a #fragment, to a heading of it; every
// mention of a doc anywhere in the repository (`docs/NAME.md`, `NAME.md §N`)
// names a doc and a section that exist; and no file of the repository
// points outside it (the design is docs/design.md, not a sibling directory).
func TestReadmeLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, f := range append(docs, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			if err := checkLink(f, m[1]); err != nil {
				t.Errorf("%s links to %s: %v", f, m[1], err)
			}
		}
	}
	for _, bad := range docMentions(t, root) {
		t.Error(bad)
	}
	out, err := exec.Command("git", "-C", root, "grep", "--untracked", "-n", "-e", `\.\./shared`, "-e", `DESIGN\.md`,
		"-e", "DESIGN §", "--", ".", ":!cmd/bridge/readme_test.go", ":!cmd/bridge/readmelinks_test.go").Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Errorf("files point outside the repository:\n%s", out)
	case errors.As(err, &exit) && exit.ExitCode() == 1: // no match
	default:
		t.Logf("git grep (not a checkout?): %v", err)
	}
}

// checkLink checks one link of the Markdown file from: a relative target
// must exist, and a fragment must be one of the target's headings (the
// file itself for a bare #fragment).
func checkLink(from, link string) error {
	target, frag, _ := strings.Cut(link, "#")
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	path := from
	if target != "" {
		path = filepath.Join(filepath.Dir(from), target)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return errors.New("no such file")
	}
	if frag == "" || !strings.HasSuffix(path, ".md") {
		return nil
	}
	if !mdAnchors(string(b))[frag] {
		return errors.New("no such heading")
	}
	return nil
}

// mdAnchors returns the anchors GitHub gives the headings of a Markdown
// text: lower case, punctuation dropped, spaces made hyphens, "-1", "-2"…
// after repeats; lines inside ``` fences are not headings.
func mdAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(l, "#") || len(l)-len(strings.TrimLeft(l, "#")) > 6 {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		a := slug.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// docMention is a doc named in any file: docs/NAME.md, or NAME.md §N.
var docMention = regexp.MustCompile("(docs/)?([a-z-]+)\\.md`? ?(§ ?([0-9]+))?")

// docMentions lists the mentions of docs in the repository's files (but
// test data, which quotes other projects) whose doc or section does not
// exist. A section is a heading "## N." or "## §N".
func docMentions(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "grep", "--untracked", "-I", "-n", "-o", "-E",
		`(docs/)?[a-z-]+\.md`+"`?"+`( ?§ ?[0-9]+)?`, "--", ".", ":(exclude,glob)**/testdata/**").Output()
	if err != nil {
		t.Logf("git grep (not a checkout?): %v", err)
		return nil
	}
	var bad []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) < 3 {
			continue
		}
		m := docMention.FindStringSubmatch(parts[2])
		if m == nil || m[1] == "" && m[4] == "" {
			continue // another Markdown file, named without docs/ or a section
		}
		doc := filepath.Join(root, "docs", m[2]+".md")
		b, err := os.ReadFile(doc)
		switch {
		case err != nil:
			bad = append(bad, parts[0]+":"+parts[1]+": names docs/"+m[2]+".md, which does not exist")
		case m[4] != "" && !regexp.MustCompile(`(?m)^## (§`+m[4]+` |`+m[4]+`\. )`).Match(b):
			bad = append(bad, parts[0]+":"+parts[1]+": names docs/"+m[2]+".md §"+m[4]+", which has no such section")
		}
	}
	return bad
}

// readmeFirstScreen is how many lines a newcomer sees first.
const readmeFirstScreen = 40

// TestReadmeFirstScreen: the README's first screen says what the bridge
// is, shows the web room, gives exactly the two commands (run the bridge
// with no config; run every test, the command .ci/run runs) and links to
// the guides, operations, the design and the references.
func TestReadmeFirstScreen(t *testing.T) {
	text := readme(t)
	lines := strings.Split(text, "\n")
	screen := strings.Join(lines[:min(readmeFirstScreen, len(lines))], "\n")
	var commands []string
	for _, l := range strings.Split(screen, "\n") {
		if c, ok := strings.CutPrefix(l, "    "); ok {
			commands = append(commands, c)
		}
	}
	want := []string{"go run ./cmd/bridge run", "go test -race -timeout 60m ./..."}
	if strings.Join(commands, "\n") != strings.Join(want, "\n") {
		t.Errorf("the first %d lines give the commands %q, want exactly %q", readmeFirstScreen, commands, want)
	}
	for _, link := range []string{"(docs/web-desktop.png)", "(docs/slack.md)", "(docs/feishu.md)", "(#operations)",
		"(docs/design.md)", "(docs/perf.md)", "(docs/security.md)", "(docs/agent-protocol.md)"} {
		if !strings.Contains(screen, link) {
			t.Errorf("the first %d lines do not link %s", readmeFirstScreen, link)
		}
	}
	if !strings.Contains(text, "\n## Operations\n") {
		t.Error("README has no Operations section")
	}
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "\n"+want[1]+"\n") {
		t.Errorf(".ci/run does not run the README's test command %q", want[1])
	}
}
