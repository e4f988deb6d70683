package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/testbin"
)

// bridgeBin is the bridge binary built once for the tests of this package.
var bridgeBin string

func TestMain(m *testing.M) {
	testbin.Main(func() int {
		defer oldBinCleanup() // the rolling upgrade's older build, if a test made it
		return m.Run()
	}, &bridgeBin, "-race")
}

// proc is a running bridge process.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string

	mu     sync.Mutex
	lines  []string
	stderr bytes.Buffer
	change chan struct{}
	done   chan struct{}
}

// startBridge runs `bridge args...` in dir (its working directory).
func startBridge(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, bridgeBin, dir, env, args...)
}

// startBinary is startBridge with another build of the bridge, bin.
func startBinary(t *testing.T, bin, dir string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// Race-built agents would each sleep 1 s at exit (GORACE atexit_sleep_ms).
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	p := &proc{t: t, cmd: cmd, dir: dir, change: make(chan struct{}), done: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.change)
			p.change = make(chan struct{})
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("bridge stdout:\n%s\nbridge stderr:\n%s", strings.Join(p.Lines(), "\n"), p.Stderr())
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *proc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("writing %q to the console: %v", line, err)
	}
}

// waitLine waits until a stdout line matches re and returns its index; from
// is the first line index to look at.
func (p *proc) waitLine(from int, re string) int {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if rx.MatchString(p.lines[i]) {
				p.mu.Unlock()
				return i
			}
		}
		ch := p.change
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.done:
			p.t.Fatalf("bridge exited before a line matched %q", re)
		case <-deadline:
			p.t.Fatalf("no line matched %q within 30s", re)
		}
	}
}

// api returns the base URL and token of the daemon whose data dir is dataDir,
// waiting until it listens.
func (p *proc) api(dataDir string) (string, string) {
	p.t.Helper()
	base, tok, ok := p.tryAPI(dataDir)
	if !ok {
		p.t.Fatalf("bridge exited: %s", p.Stderr())
	}
	return base, tok
}

// tryAPI is api for a daemon that may die first (a crash test's failpoint):
// ok is false if it exited before it listened.
func (p *proc) tryAPI(dataDir string) (base, token string, ok bool) {
	p.t.Helper()
	return p.tryAPIVia(dataDir, "http", http.DefaultClient)
}

// tryAPIVia is tryAPI for a daemon serving scheme (http, https) with the
// API client hc.
func (p *proc) tryAPIVia(dataDir, scheme string, hc *http.Client) (base, token string, ok bool) {
	p.t.Helper()
	if base, ok = p.listening(dataDir, scheme, hc); !ok {
		return "", "", false
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "api.token"))
	if err != nil {
		p.t.Fatalf("daemon listens, but: %v", err)
	}
	return base, strings.TrimSpace(string(tok)), true
}

// listening waits until the daemon whose data dir is dataDir has written
// its address there and answers /healthz on it, and returns its base URL;
// ok is false if it exited first.
func (p *proc) listening(dataDir, scheme string, hc *http.Client) (base string, ok bool) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if addr, err := os.ReadFile(filepath.Join(dataDir, "http.addr")); err == nil {
			base := scheme + "://" + strings.TrimSpace(string(addr))
			if resp, err := hc.Get(base + "/healthz"); err == nil {
				resp.Body.Close()
				return base, true
			}
		}
		select {
		case <-p.done:
			return "", false
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatal("daemon did not start listening within 30s")
	return "", false
}

// call makes an API call and decodes the JSON answer into v (if not nil).
func call(t *testing.T, method, url, token string, body any, v any) int {
	t.Helper()
	code, err := apiCall(method, url, token, body, v)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code
}

// apiCall is call that returns transport errors (for a daemon being killed).
func apiCall(method, url, token string, body any, v any) (int, error) {
	return apiCallVia(http.DefaultClient, method, url, token, body, v)
}

// apiCallVia is apiCall with the client hc.
func apiCallVia(hc *http.Client, method, url, token string, body any, v any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if v != nil {
		_ = json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode, nil
}

// runCLI runs the bridge CLI to completion and returns its output and exit code.
func runCLI(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bridgeBin, args...)
	cmd.Dir = dir
	// The race runtime would sleep 1 s at each exit (GORACE atexit_sleep_ms).
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
