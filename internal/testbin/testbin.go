// Package testbin builds the bridge binary once per test process, for tests
// that run it (as the daemon, or as `bridge demo-agent`).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build compiles github.com/roombridge/roombridge/cmd/bridge (with extra
// go build flags, e.g. "-race") into a temporary directory and returns its
// path and a cleanup func.
func Build(flags ...string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "bridge-bin")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "bridge")
	args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/roombridge/roombridge/cmd/bridge")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building bridge: %v\n%s", err, out)
	}
	return bin, func() { _ = os.RemoveAll(dir) }, nil
}

// Main is a TestMain body: it builds the binary into *bin, runs the tests
// and exits with their code.
func Main(run func() int, bin *string, flags ...string) {
	path, cleanup, err := Build(flags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = path
	code := run()
	cleanup()
	os.Exit(code)
}
