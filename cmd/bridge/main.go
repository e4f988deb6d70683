// Command bridge gives AI agents a room in Slack, Feishu and the terminal.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx (a graceful stop); a second
	// exits at once (signals.go).
	ctx, stop := onSignals(context.Background())
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fatal(err)
	}
}

// fatal prints err (every joined error) and exits: 2 for usage errors, else 1.
func fatal(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", progName(), err)
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	os.Exit(1)
}

// progName is the name the program was invoked as (./bin/bridge → "bridge",
// or whatever it was installed as), for help and error output: a "bridge"
// on PATH may be another program (Debian's iproute2 has one).
func progName() string {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return "bridge"
	}
	return filepath.Base(os.Args[0])
}
