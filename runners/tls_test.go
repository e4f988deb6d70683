package runners_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/internal/tlstest"
	"github.com/roombridge/roombridge/runners"
)

// TestRunnerOverTLS: a bridge whose API port serves TLS
// (http.tls_cert_file) takes a runner that trusts its CA over https (gRPC
// on HTTP/2 by ALPN) and runs its turn; a runner without the CA is refused
// at the handshake, and its log names the certificate error.
func TestRunnerOverTLS(t *testing.T) {
	dir := t.TempDir()
	f := tlstest.Write(t, dir)
	b := coretest.Start(t, coretest.Options{Dir: dir, Surfaces: []string{chat.Console}, HoldOutbox: true,
		Config: bridgeConfig + "http: {tls_cert_file: %DIR%/server.pem, tls_key_file: %DIR%/server.key}\n"})
	if !strings.HasPrefix(b.URL, "https://") {
		t.Fatalf("URL %s, want https", b.URL)
	}
	tok := addRunner(t, b.DB, "laptop")

	var logs syncbuf.Buffer
	startRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok,
		TLS: &tls.Config{MinVersion: tls.VersionTLS12}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, "the runner without the CA logging its certificate error", func() bool {
		return strings.Contains(logs.String(), "x509: certificate signed by unknown authority")
	})
	if st, err := b.Runners().Statuses(context.Background()); err != nil || len(st) != 1 || st[0].Connected {
		t.Fatalf("statuses %+v, %v; want laptop not connected", st, err)
	}

	startRunner(t, runners.RunnerOptions{Name: "laptop", URLs: []string{b.URL}, Token: tok,
		TLS: &tls.Config{RootCAs: f.Pool(t), MinVersion: tls.VersionTLS12}})
	waitConnected(t, b, "laptop")
	askCoder(t, b)
}
