package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Kinds of packages, by path relative to the module.
const (
	core      = "core"      // everything not below
	command   = "command"   // cmd/...
	connector = "connector" // connectors/... (ratelimit too)
	internal  = "internal"  // internal/...
	fake      = "fake"      // a test fake or suite: the last element ends in "test" (slacktest, etcdtest, storetest)
	outside   = "outside"   // stdlib or a third-party module
)

// sdks are the platform SDKs only connectors may import.
var sdks = []string{"github.com/slack-go/slack", "github.com/larksuite/oapi-sdk-go"}

// connectorMay are the core packages a connector may depend on (besides
// connectors/... such as connectors/ratelimit, internal/... and the world
// outside the module): the delivery contract and the clock.
var connectorMay = []string{"chat", "clock"}

// graph is the module's import graph (test files excluded: a connector's
// tests may run the whole core).
type graph struct {
	module  string
	imports map[string][]string // module package → its imports
}

// kind classifies an import path.
func (g graph) kind(p string) string {
	rel, ok := strings.CutPrefix(p, g.module+"/")
	switch {
	case !ok && p != g.module:
		return outside
	case strings.HasSuffix(path.Base(rel), "test"):
		return fake
	case rel == "cmd" || strings.HasPrefix(rel, "cmd/"):
		return command
	case strings.HasPrefix(rel, "connectors/"):
		return connector
	case strings.HasPrefix(rel, "internal/"):
		return internal
	}
	return core
}

func (g graph) rel(p string) string { return strings.TrimPrefix(p, g.module+"/") }

// forbidden says why from (of kind k) may not depend on to, or "".
func (g graph) forbidden(k, to string) string {
	tk := g.kind(to)
	switch k {
	case connector:
		if tk == core && !slices.Contains(connectorMay, g.rel(to)) {
			return "a connector depends on a core package (allowed: " + strings.Join(connectorMay, ", ") + ", connectors/..., internal/...)"
		}
		if tk == command {
			return "a connector depends on a command"
		}
	case core:
		switch {
		case tk == connector:
			return "the core depends on a connector"
		case tk == command:
			return "the core depends on a command"
		case tk == fake:
			return "the core depends on a test fake"
		case tk == outside && slices.ContainsFunc(sdks, func(s string) bool { return to == s || strings.HasPrefix(to, s+"/") }):
			return "the core depends on a platform SDK"
		}
	}
	return ""
}

// violations checks every connector and core package of g: it walks what
// each depends on through the module's packages (so a forbidden package
// reached through internal/... counts too) and names each forbidden
// dependency with the path to it, whose last edge is the offending import.
func (g graph) violations() []string {
	var out []string
	for _, from := range slices.Sorted(maps.Keys(g.imports)) {
		k := g.kind(from)
		if k != connector && k != core {
			continue
		}
		via := map[string]string{from: ""} // package → the one importing it on the path
		queue := []string{from}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, to := range g.imports[p] {
				if _, seen := via[to]; seen {
					continue
				}
				via[to] = p
				if why := g.forbidden(k, to); why != "" {
					out = append(out, fmt.Sprintf("%s: %s (edge %s → %s)", why, g.path(via, to), g.rel(p), g.rel(to)))
					continue
				}
				if _, inModule := g.imports[to]; inModule && g.kind(to) != outside {
					queue = append(queue, to)
				}
			}
		}
	}
	return out
}

// path is the import path from the root of via to p, as "a → b → c".
func (g graph) path(via map[string]string, p string) string {
	var chain []string
	for ; p != ""; p = via[p] {
		chain = append(chain, g.rel(p))
	}
	slices.Reverse(chain)
	return strings.Join(chain, " → ")
}

var (
	loadOnce sync.Once
	loaded   graph
	loadErr  error
)

// load lists the module's packages and their (non-test) imports with `go
// list -deps -json`, once per test binary.
func load(t *testing.T) graph {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = goList() })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

func goList() (graph, error) {
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		return graph{}, fmt.Errorf("go list -m: %w", err)
	}
	modPath, dir, _ := strings.Cut(strings.TrimSpace(string(mod)), " ")
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard,DepOnly", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return graph{}, fmt.Errorf("go list -deps: %w: %s", err, stderr.String())
	}
	g := graph{module: modPath, imports: map[string][]string{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
			DepOnly    bool
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return graph{}, fmt.Errorf("go list -deps: decoding: %w", err)
		}
		if !p.Standard && g.kind(p.ImportPath) != outside {
			g.imports[p.ImportPath] = p.Imports
		}
	}
	return g, nil
}

// TestLayering: connectors import no core package (so they cannot touch the
// store or the state machine), and the core imports no connector, SDK,
// command or fake. With it, and Go's own ban on cycles, the connectors and
// the store sit at the bottom of the graph and nothing points back up.
func TestLayering(t *testing.T) {
	g := load(t)
	for _, v := range g.violations() {
		t.Error(v)
	}
}

// TestClassification guards the test itself: the packages it must see are
// listed and classified as the rules assume (a go list that lists nothing
// would pass TestLayering vacuously).
func TestClassification(t *testing.T) {
	g := load(t)
	for rel, want := range map[string]string{
		"chat": core, "threads": core, "store": core, "store/etcd": core, "config": core,
		"connectors/slack": connector, "connectors/feishu": connector, "connectors/console": connector,
		"connectors/ratelimit": connector, "connectors/slack/slacktest": fake, "store/etcd/etcdtest": fake,
		"cmd/bridge": command, "internal/failpoint": internal,
	} {
		p := g.module + "/" + rel
		if _, ok := g.imports[p]; !ok {
			t.Errorf("go list did not list %s", rel)
		}
		if k := g.kind(p); k != want {
			t.Errorf("%s is classified %s, want %s", rel, k, want)
		}
	}
	if k := g.kind("github.com/slack-go/slack"); k != outside {
		t.Errorf("the Slack SDK is classified %s, want %s", k, outside)
	}
}

// TestViolationsNameTheEdge checks the checker on a made-up graph with a
// breach of each rule, direct and through internal/..., and allowed imports that must
// not be reported (a connector's own fake, chat, clock, ratelimit).
func TestViolationsNameTheEdge(t *testing.T) {
	m := "example.com/m"
	g := graph{module: m, imports: map[string][]string{
		m + "/chat":                         nil,
		m + "/store":                        {m + "/chat"},
		m + "/newcore":                      {m + "/internal/x", "github.com/slack-go/slack/socketmode"},
		m + "/internal/x":                   {m + "/connectors/slack"},
		m + "/connectors/slack":             {m + "/chat", m + "/internal/y", "github.com/slack-go/slack"},
		m + "/internal/y":                   {m + "/store"},
		m + "/connectors/feishu":            {m + "/chat", m + "/clock", m + "/connectors/ratelimit", m + "/connectors/feishu/feishutest"},
		m + "/clock":                        nil,
		m + "/connectors/ratelimit":         {m + "/chat"},
		m + "/connectors/feishu/feishutest": nil,
		m + "/store/etcd":                   {m + "/store", m + "/store/etcd/etcdtest"},
		m + "/store/etcd/etcdtest":          {m + "/store/etcd"},
	}}
	got := g.violations()
	slices.Sort(got)
	want := []string{
		"a connector depends on a core package (allowed: chat, clock, connectors/..., internal/...): connectors/slack → internal/y → store (edge internal/y → store)",
		"the core depends on a connector: newcore → internal/x → connectors/slack (edge internal/x → connectors/slack)",
		"the core depends on a platform SDK: newcore → github.com/slack-go/slack/socketmode (edge newcore → github.com/slack-go/slack/socketmode)",
		"the core depends on a test fake: store/etcd → store/etcd/etcdtest (edge store/etcd → store/etcd/etcdtest)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
