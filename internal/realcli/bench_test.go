package realcli_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/fakemodel"
	"github.com/roombridge/roombridge/internal/realcli"
)

// BenchmarkCLITurn measures the per-turn overhead of each real CLI, run as
// the bridge runs it for a plain answer (a fresh process a turn): the
// time from its start to its first model call, the whole turn, and the
// peak RSS of its largest process (wait4's rusage of the CLI: its own, or
// that of the largest descendant it waited for).
func BenchmarkCLITurn(b *testing.B) {
	for _, kind := range []string{"claude", "codex"} {
		b.Run(kind, func(b *testing.B) {
			bin := realcli.Bin(b, kind)
			var first time.Time
			model := fakemodel.Anthropic
			if kind == "codex" {
				model = fakemodel.OpenAI
			}
			s := model(b, func(n int, r fakemodel.Request) fakemodel.Reply {
				if first.IsZero() {
					first = r.At
				}
				return fakemodel.Text("four")
			})
			home := b.TempDir()
			args := []string{"-p", "what is 2+2?", "--output-format", "stream-json", "--verbose"}
			env := realcli.ClaudeEnv(s.URL, 0)
			if kind == "codex" {
				if err := realcli.SetupCodex(home, s.URL, 0); err != nil {
					b.Fatal(err)
				}
				args, env = []string{"exec", "--json", "--skip-git-repo-check", "what is 2+2?"}, realcli.CodexEnv()
			}
			var toFirst, turn time.Duration
			var rss int64
			for b.Loop() {
				first = time.Time{}
				cmd := exec.Command(bin, args...)
				cmd.Dir = home
				cmd.Env = append(append(os.Environ(), "HOME="+home, "CODEX_HOME="+home+"/.codex", "CLAUDE_CONFIG_DIR="+home+"/.claude"), env...)
				start := time.Now()
				if out, err := cmd.Output(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				turn += time.Since(start)
				toFirst += first.Sub(start)
				if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
					rss = max(rss, ru.Maxrss)
				}
			}
			b.ReportMetric(float64(toFirst.Milliseconds())/float64(b.N), "ms-to-first-call/op")
			b.ReportMetric(float64(turn.Milliseconds())/float64(b.N), "ms-turn/op")
			b.ReportMetric(float64(rss)/1024, "MiB-peak-RSS")
		})
	}
}
