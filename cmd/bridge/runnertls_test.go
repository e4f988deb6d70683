package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/internal/tlstest"
)

// TestRunnerOverTLS: a bridge serving its API port over TLS
// (http.tls_cert_file, http.tls_key_file) answers the REST API over https
// to a client with the CA, and the CLI (`bridge runners add`, trusting the
// configured certificate); a runner without runner.ca_file is refused at
// the handshake and its log names the certificate error; a runner with
// ca_file connects and runs the turn, as separate processes.
func TestRunnerOverTLS(t *testing.T) {
	dir := t.TempDir()
	f := tlstest.Write(t, dir)
	bridge, rdir := runnerBridge(t, dir, "2s", fmt.Sprintf(", tls_cert_file: %q, tls_key_file: %q", f.Cert, f.Key))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.Pool(t), MinVersion: tls.VersionTLS12}}}
	t.Cleanup(hc.CloseIdleConnections)
	base, token, ok := bridge.tryAPIVia(filepath.Join(dir, "data"), "https", hc)
	if !ok {
		t.Fatalf("bridge exited: %s", bridge.Stderr())
	}
	if bridge.waitStderr(`"api":"`+base+`"`, `api=`+base) == "" {
		t.Fatalf("the bridge did not log its API as %s:\n%s", base, bridge.Stderr())
	}
	addRunner(t, dir, rdir, `read turn
echo '{"type":"final","text":"answered over tls"}'
`)
	var st []map[string]any
	if code := callVia(t, hc, http.MethodGet, base+"/v1/runners", token, &st); code != http.StatusOK || len(st) != 1 {
		t.Fatalf("GET /v1/runners over https: %d %v", code, st)
	}

	runnerYAML := func(caFile string) string {
		return fmt.Sprintf("runner: {name: laptop, bridges: [%s], token_file: token%s}\nagents:\n  coder: {kind: exec, command: [sh, agent.sh], workdir: .}\n", base, caFile)
	}
	writeFile(t, filepath.Join(rdir, "untrusting.yaml"), runnerYAML(""))
	untrusting := startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "untrusting.yaml")
	if untrusting.waitStderr("x509: certificate signed by unknown authority") == "" {
		t.Fatalf("the runner without ca_file logged no certificate error:\n%s", untrusting.Stderr())
	}
	_ = untrusting.cmd.Process.Kill()
	<-untrusting.done

	writeFile(t, filepath.Join(rdir, "runner.yaml"), runnerYAML(", ca_file: "+f.CA))
	startBinary(t, bridgeBin, rdir, nil, "runner", "--config", "runner.yaml")
	waitRunnerVia(t, hc, base, token, "connected")
	bridge.send("@coder go")
	bridge.waitLine(0, `answered over tls`)
}

// callVia is call with the API client hc (no body).
func callVia(t *testing.T, hc *http.Client, method, url, token string, v any) int {
	t.Helper()
	code, err := apiCallVia(hc, method, url, token, nil, v)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code
}

// waitStderr waits until p's stderr contains one of subs and returns it
// ("" after 30 s or once p has exited without it).
func (p *proc) waitStderr(subs ...string) string {
	deadline := time.Now().Add(30 * time.Second)
	for exited := false; ; {
		out := p.Stderr()
		for _, s := range subs {
			if strings.Contains(out, s) {
				return s
			}
		}
		if exited || time.Now().After(deadline) {
			return ""
		}
		select {
		case <-p.done:
			exited = true // its last words are in: look once more
		case <-time.After(20 * time.Millisecond):
		}
	}
}
