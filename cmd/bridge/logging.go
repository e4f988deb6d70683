package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/internal/clip"
)

// logFileName is the log file in the data dir of a console run.
const logFileName = "bridge.log"

// openLog returns the daemon's logger, at log.level in log.format, and what
// closes it. Logs go to stderr, to the file log.file, or, for a console room
// at a terminal (the room has the terminal to itself), to
// <data_dir>/bridge.log while each warning still shows on the terminal in
// one short line.
func openLog(cfg *config.Config, stderr io.Writer, terminal bool) (*slog.Logger, func(), error) {
	handler := func(w io.Writer) slog.Handler { return logHandler(cfg.Log, w) }
	path := cfg.Log.File
	if path == "" && terminal && hasConsole(cfg) {
		path = filepath.Join(cfg.DataDir, logFileName)
	}
	if path == "" || path == "stderr" {
		return slog.New(handler(stderr)), func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("log.file: %w", err)
	}
	var h slog.Handler = handler(f)
	if terminal {
		h = warnLine{Handler: h, out: stderr, file: path}
		fmt.Fprintf(stderr, "%s: logs go to %s (log.file: stderr shows them here)\n", progName(), path)
	}
	return slog.New(h), func() { _ = f.Close() }, nil
}

// logHandler writes to w at l's level, as text (key=value) or json.
func logHandler(l config.Log, w io.Writer) slog.Handler {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(orDefault(l.Level, "info"))))
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// hasConsole reports whether cfg has a console room.
func hasConsole(cfg *config.Config) bool {
	for _, r := range cfg.Rooms {
		if _, ok := r.Bound()["console"]; ok {
			return true
		}
	}
	return false
}

// warnLine logs to a file and shows each warning or error on the terminal
// in one short line that points to the file.
type warnLine struct {
	slog.Handler
	out  io.Writer
	file string
}

func (w warnLine) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		fmt.Fprintf(w.out, "%s: %s: %s (details: %s)\n", progName(), strings.ToLower(r.Level.String()),
			clip.Line(r.Message, 100, clip.Runes), w.file)
	}
	return w.Handler.Handle(ctx, r)
}

func (w warnLine) WithAttrs(as []slog.Attr) slog.Handler {
	return warnLine{Handler: w.Handler.WithAttrs(as), out: w.out, file: w.file}
}

func (w warnLine) WithGroup(name string) slog.Handler {
	return warnLine{Handler: w.Handler.WithGroup(name), out: w.out, file: w.file}
}
