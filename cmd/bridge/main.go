// Command bridge gives AI agents a room in Slack, Feishu and the terminal.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx (a graceful stop); a second
	// exits at once (signals.go).
	ctx, stop := onSignals(context.Background())
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fatal(err)
	}
}

// fatal prints err (every joined error) and exits: 2 for usage errors, else 1.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bridge:", err)
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	os.Exit(1)
}
