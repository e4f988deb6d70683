package httpapi_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/core/coretest"
)

// dial opens a connection to the bridge's HTTP server.
func (e *env) dial() net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.b.URL, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reports whether the server closes c (a read ends in EOF or
// a reset) within d; data the server sends first is skipped.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestConnectionsTimeOut: an idle keep-alive connection is closed after
// http.idle_timeout, a body sent a byte at a time is cut after
// http.read_timeout, and one client address gets at most
// http.max_conns_per_client connections (the ones over it are closed at
// once, the others still served).
func TestConnectionsTimeOut(t *testing.T) {
	e := start(t, "http: {idle_timeout: 300ms, read_timeout: 500ms, max_conns_per_client: 4}", true, nil)

	idle := e.dial()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	if !closedWithin(idle, 5*time.Second) {
		t.Error("an idle keep-alive connection stayed open 5 s (idle_timeout 300ms)")
	}

	slow := e.dial()
	if _, err := io.WriteString(slow, "POST /v1/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+coretest.Token+"\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	go func() { // the attack: a byte every 50 ms, until the server cuts
		defer close(cut)
		for range 200 {
			if _, err := slow.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	select {
	case <-cut:
	case <-time.After(8 * time.Second):
		t.Error("a body sent at 20 bytes/s was not cut within 8 s (read_timeout 500ms)")
	}

	var conns []net.Conn
	for range 4 {
		conns = append(conns, e.dial())
	}
	over := e.dial()
	if !closedWithin(over, 5*time.Second) {
		t.Error("a 5th connection from one address was not closed (max_conns_per_client 4)")
	}
	if _, err := io.WriteString(conns[0], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(conns[0]), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection under the cap: %v %v", resp, err)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	// The slots are released: a new connection is served.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := e.dial()
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatal("no connection served 5 s after the others closed")
		}
	}
}
