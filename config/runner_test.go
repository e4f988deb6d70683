package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRunnerRefusesBadFiles: a runner's file is read like the bridge's
// (one decoder): an empty file, a file that is not a mapping and an unknown
// key are each refused with an error that says so, naming the key's line.
func TestLoadRunnerRefusesBadFiles(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "the file is empty"},
		{"not a mapping", "- runner\n", "not a mapping of keys"},
		{"unknown key", "runner: {name: laptop, bogus: 1}\n", "runner.bogus: unknown key at line 1"},
		{"bad bridge URL", "runner:\n  name: laptop\n  bridges:\n    - ftp://x\n", `runner.bridges[0]: "ftp://x" is not a URL (want https://host:port) at line 4`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "runner.yaml")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadRunner(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadRunner(%q): %v, want an error saying %q", tc.text, err, tc.want)
			}
		})
	}
}
