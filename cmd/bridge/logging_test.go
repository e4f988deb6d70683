package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/internal/syncbuf"
)

// TestConsoleLogsToFile: a console room at a terminal logs to the data
// dir's file, and a warning also shows on the terminal in one short line;
// elsewhere (not a terminal, or log.file: stderr) logs go to stderr.
func TestConsoleLogsToFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		file     string
		terminal bool
		toFile   bool
	}{
		{"console at a terminal", "", true, true},
		{"not a terminal", "", false, false},
		{"asked for stderr", "stderr", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default("/bin/true")
			cfg.DataDir = t.TempDir()
			cfg.Log.File = tc.file
			var term syncbuf.Buffer
			log, closeLog, err := openLog(cfg, &term, tc.terminal)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("bridge started", "api", "http://127.0.0.1:1")
			log.Warn("delivery failed", "request_id", "R20261201-01", "error", strings.Repeat("x", 300))
			closeLog()
			data, _ := os.ReadFile(filepath.Join(cfg.DataDir, logFileName))
			file := string(data)
			if !tc.toFile {
				if file != "" || !strings.Contains(term.String(), "bridge started") || !strings.Contains(term.String(), "delivery failed") {
					t.Fatalf("stderr %q, file %q: want every line on stderr", term.String(), file)
				}
				return
			}
			if !strings.Contains(file, "bridge started") || !strings.Contains(file, "request_id=R20261201-01") {
				t.Fatalf("log file %q: want every line", file)
			}
			lines := strings.Split(strings.TrimSpace(term.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], "logs go to "+filepath.Join(cfg.DataDir, logFileName)) {
				t.Fatalf("terminal %q: want a first line saying where the logs go", term.String())
			}
			lines = lines[1:]
			if !strings.Contains(lines[0], "warn: delivery failed") || strings.Contains(lines[0], "xxx") ||
				!strings.Contains(lines[0], logFileName) {
				t.Fatalf("terminal %q: want one short line for the warning, pointing to the file", term.String())
			}
		})
	}
}
