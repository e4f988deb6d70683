package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// onSignals returns a context that the first SIGINT or SIGTERM cancels: for
// the daemon, the start of a graceful stop (see daemon). A second signal
// exits the process at once, with status 128 + its number (130 for SIGINT,
// 143 for SIGTERM), waiting for nothing: what still runs is resumed by the
// next start, as after a crash. stop ends the handling.
//
// signal.NotifyContext is not enough: after the first signal it leaves the
// signals to their default action only once stop is called, which the
// daemon does only when its graceful stop is over.
func onSignals(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-ch:
			// Through the daemon's logger (slog's default), in its format.
			slog.Warn("a second signal: exiting at once", "signal", sig.String())
			os.Exit(exitCode(sig))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// exitCode is the status of a process ended by sig, as a shell reports it.
func exitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
