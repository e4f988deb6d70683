package fakemodel

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func runScratch(t *testing.T, name string, reply Reply, args ...string) {
	var s *Server
	home := t.TempDir()
	var cmd *exec.Cmd
	if name == "claude" {
		s = Anthropic(t, func(n int, r Request) Reply { return reply })
		cmd = exec.Command(os.Getenv("CLAUDE"), args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "ANTHROPIC_BASE_URL=" + s.URL, "ANTHROPIC_API_KEY=sk-fake",
			"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CODE_MAX_RETRIES=2"}
	} else {
		s = OpenAI(t, func(n int, r Request) Reply { return reply })
		os.MkdirAll(home+"/.codex", 0o700)
		os.WriteFile(home+"/.codex/config.toml", []byte(CodexConfig(s.URL, 1)), 0o600)
		cmd = exec.Command(os.Getenv("CODEX"), args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "CODEX_HOME=" + home + "/.codex", "FAKE_OPENAI_API_KEY=sk-fake"}
	}
	cmd.Dir = home
	var stderr strings.Builder
	cmd.Stderr = &stderr
	st := time.Now()
	out, err := cmd.Output()
	fmt.Printf("=== %s %v took %v err=%v\nSTDOUT:\n%s\nSTDERR:\n%s\n", name, args[len(args)-1], time.Since(st), err, out, stderr.String())
	for _, r := range s.Requests() {
		fmt.Printf("REQ %s at +%v\n", r.Path, r.At.Sub(st))
	}
}

func TestScratch(t *testing.T) {
	e401 := Reply{Status: 401, Error: AnthropicError("authentication_error", "invalid x-api-key")}
	runScratch(t, "claude", e401, "-p", "hi", "--output-format", "stream-json", "--verbose")
	runScratch(t, "claude", Text("x"), "-p", "hi", "--output-format", "stream-json", "--verbose", "--resume=6f1d2a3b-0000-4000-8000-000000000001")
	runScratch(t, "claude", Reply{Status: 529, Error: AnthropicError("overloaded_error", "Overloaded")}, "-p", "hi", "--output-format", "stream-json", "--verbose")
	runScratch(t, "claude", Reply{Text: "a long answer that drops", Drop: true}, "-p", "hi", "--output-format", "stream-json", "--verbose")
	o401 := Reply{Status: 401, Error: OpenAIError("invalid_request_error", "invalid_api_key", "Incorrect API key provided")}
	runScratch(t, "codex", o401, "exec", "--json", "--skip-git-repo-check", "hi")
	runScratch(t, "codex", Text("x"), "exec", "--json", "--skip-git-repo-check", "resume", "01a230c1-8975-7f71-a9ba-cdcb42706b05", "hi")
	runScratch(t, "codex", Reply{Status: 429, Error: OpenAIError("rate_limit_exceeded", "rate_limit_exceeded", "Rate limit reached"), RetryAfter: "1"}, "exec", "--json", "--skip-git-repo-check", "hi")
	runScratch(t, "codex", Reply{Text: "a long answer that drops", Drop: true}, "exec", "--json", "--skip-git-repo-check", "hi")
}
