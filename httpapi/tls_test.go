package httpapi_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/internal/tlstest"
	"github.com/roombridge/roombridge/requests"
)

// TestAPIOverTLS: with http.tls_cert_file and http.tls_key_file the API
// port serves TLS; ALPN gives HTTP/2 to a client that offers h2 (what the
// runners' gRPC needs) and HTTP/1.1 to one that offers only that; a client
// without the CA is refused with a certificate error, and plaintext gets
// a 400 that says the port speaks HTTPS.
func TestAPIOverTLS(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	e := start(t, fmt.Sprintf("http: {tls_cert_file: %q, tls_key_file: %q}", f.Cert, f.Key), true, nil)
	if !strings.HasPrefix(e.b.URL, "https://127.0.0.1:") {
		t.Fatalf("URL %s, want https://127.0.0.1:PORT", e.b.URL)
	}
	for _, tc := range []struct {
		h2    bool
		offer []string
		alpn  string
		major int
	}{{true, []string{"http/1.1", "h2"}, "h2", 2}, {false, []string{"http/1.1"}, "http/1.1", 1}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.Pool(t), NextProtos: tc.offer}, Protocols: new(http.Protocols)}
		tr.Protocols.SetHTTP1(true)
		tr.Protocols.SetHTTP2(tc.h2)
		t.Cleanup(tr.CloseIdleConnections)
		req, err := http.NewRequest(http.MethodGet, e.b.URL+"/v1/requests", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+coretest.Token)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatalf("h2 %v: %v", tc.h2, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.NegotiatedProtocol != tc.alpn || resp.ProtoMajor != tc.major {
			t.Fatalf("client offering %v: HTTP %d over %s, TLS %v; want 200 over ALPN %q", tc.offer, resp.StatusCode, resp.Proto, resp.TLS != nil, tc.alpn)
		}
	}

	untrusting := &http.Client{Transport: &http.Transport{}}
	if _, err := untrusting.Get(e.b.URL + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("a client without the CA: %v; want a certificate error", err)
	}
	resp, err := http.Get("http://" + strings.TrimPrefix(e.b.URL, "https://") + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
		t.Fatalf("plaintext to the TLS port: HTTP %d %q; want 400 naming HTTPS", resp.StatusCode, b)
	}
}

// TestLocalURLsFollowTLS: with TLS on the API port, an agent the bridge
// runs itself is given the agent tools' URL as https (the port speaks
// nothing else), and the web room's fallback URL is https too.
func TestLocalURLsFollowTLS(t *testing.T) {
	dir := t.TempDir()
	f := tlstest.Write(t, dir)
	b := coretest.Start(t, coretest.Options{Dir: dir, Surfaces: []string{chat.Console}, HoldOutbox: true, Config: fmt.Sprintf(`
owner: acme
owners: [console:you]
data_dir: %%DIR%%
http: {tls_cert_file: %q, tls_key_file: %q}
web: {enabled: true}
rooms:
  - {name: main, console: true, agents: [coder]}
agents:
  coder: {kind: exec, command: [sh, -c, 'read turn; echo "{\"type\":\"final\",\"text\":\"$ROOMBRIDGE_MCP_URL\"}"']}
`, f.Cert, f.Key)})
	if got := b.Web().URL(); got != b.URL || !strings.HasPrefix(got, "https://") {
		t.Fatalf("web room URL %q, want the API's https URL %q", got, b.URL)
	}
	ctx := context.Background()
	r, err := b.Requests().Create(ctx, requests.Ask{Agent: "coder", Room: "main", Surface: chat.Console, User: "console:you", Text: "go"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := b.Requests().Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == requests.Done {
			if got.Result != b.URL+"/mcp" {
				t.Fatalf("the agent was given the tools at %q, want %q", got.Result, b.URL+"/mcp")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s is %s, want done", r.ID, got.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
