package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// configDirFile is a bridge.yaml whose paths are relative: data_dir and the
// API token next to the file (as `bridge init` puts them).
const configDirFile = `owner: local
owners: [console:you]
data_dir: .roombridge
http: {addr: "127.0.0.1:0", api_token_file: api.token}
console: {user: you}
rooms: [{name: console, channels: {console: console}, agents: [coder]}]
agents: {coder: {command: [%q, demo-agent], workdir: work/coder}}
`

// TestConfigPathsRelativeToFile: a config's relative paths are its
// directory's, wherever the bridge is started from. Started from the
// directory above with --config mybridge/bridge.yaml, the bridge keeps its
// data in mybridge/.roombridge and uses the token next to the file (no new
// one, nothing made in the current directory), and says which file it
// read; the CLI finds it from the same place, and from mybridge without
// --config (./bridge.yaml).
func TestConfigPathsRelativeToFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "mybridge")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "bridge.yaml"), fmt.Sprintf(configDirFile, bridgeBin))
	const token = "token-next-to-the-config"
	writeFile(t, filepath.Join(dir, "api.token"), token+"\n")

	p := startBridge(t, root, nil, "run", "--config", "mybridge/bridge.yaml")
	base, ok := p.listening(filepath.Join(dir, ".roombridge"), "http", http.DefaultClient)
	if !ok {
		t.Fatalf("bridge exited: %s", p.Stderr())
	}
	if code := call(t, "GET", base+"/v1/requests", token, nil, nil); code != http.StatusOK {
		t.Errorf("GET /v1/requests with the token next to the config: %d", code)
	}
	for _, p := range []string{filepath.Join(root, ".roombridge"), filepath.Join(root, "api.token"),
		filepath.Join(dir, "mybridge"), filepath.Join(dir, ".roombridge", "api.token")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	cfgPath := filepath.Join(dir, "bridge.yaml")
	if !strings.Contains(p.Stderr(), "config="+cfgPath) {
		t.Errorf("the start does not log the config file %s:\n%s", cfgPath, p.Stderr())
	}
	for _, c := range []struct {
		dir  string
		args []string
	}{
		{root, []string{"requests", "list", "--config", "mybridge/bridge.yaml"}},
		{dir, []string{"requests", "list"}},
	} {
		if out, stderr, code := runCLI(t, c.dir, c.args...); code != 0 {
			t.Errorf("in %s: %s: exit %d: %s%s", c.dir, strings.Join(c.args, " "), code, stderr, out)
		}
	}
	out, stderr, code := runCLI(t, dir, "config", "check")
	if want := "config: " + cfgPath + "; relative paths are relative to " + dir + "\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("config check in %s: exit %d, %s%s\nwant the line %q", dir, code, stderr, out, want)
	}
}
