package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// startEtcd runs an idle bridge on a real (embedded) etcd member with the
// store's timeout (0: its default), and room for many queued requests.
func startEtcd(t *testing.T, timeout time.Duration) (*env, *etcdtest.Server) {
	t.Helper()
	srv := etcdtest.Start(t)
	st, err := etcd.New(srv.Client(t), etcd.Options{Prefix: "/t", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return start(t, "requests: {queue_limit: 100000}", true, st), srv
}

// TestStoreUnreachable: with the etcd member stopped, a read answers 503
// saying the store is unreachable within a short bounded wait (with
// Retry-After, no internal text), an audit export fails before its first
// byte with a 503, and /metrics still answers 200.
func TestStoreUnreachable(t *testing.T) {
	e, srv := startEtcd(t, 0)
	for i := range 3 {
		if _, err := e.b.Requests().Create(t.Context(), requests.Ask{Agent: "coder", Room: "main", Surface: chat.API,
			User: httpapi.APIActor, Text: fmt.Sprint("ask ", i), Approved: true}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	for _, path := range []string{"/v1/requests", "/v1/requests/R-01", "/v1/audit"} {
		began := time.Now()
		var eb errBody
		resp := e.api("GET", path, "", &eb)
		took := time.Since(began)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(eb.Error, "store is unreachable") ||
			resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET %s without etcd: %d %q (Retry-After %q), want 503", path, resp.StatusCode, eb.Error, resp.Header.Get("Retry-After"))
		}
		if strings.Contains(eb.Error, "etcd") || strings.Contains(eb.Error, "deadline") {
			t.Errorf("GET %s: the answer shows internal text: %q", path, eb.Error)
		}
		if took > httpapi.ReadWait+2*time.Second {
			t.Errorf("GET %s took %v, want at most ReadWait (%v) and a little", path, took, httpapi.ReadWait)
		}
	}
	began := time.Now()
	resp, body := e.call("GET", "/metrics", "", "", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "roombridge_") {
		t.Errorf("/metrics without etcd: %d\n%.500s", resp.StatusCode, body)
	}
	if took := time.Since(began); took > 2*httpapi.ReadWait+2*time.Second {
		t.Errorf("/metrics without etcd took %v", took)
	}
}

// exportRecords of 8 KiB make an export (8 MB) that cannot fit in the
// socket buffers (at most 4 MiB send buffer, a 4 KiB receive buffer): the
// server is still reading the store when the member stops.
const exportRecords = 1000

// TestAuditExportIncomplete: an export whose store fails after the first
// byte ends with a line saying it is incomplete and the error trailer.
func TestAuditExportIncomplete(t *testing.T) {
	e, srv := startEtcd(t, time.Second)
	coretest.FillAudit(t, e.b.Requests().Store(), exportRecords, 8<<10)
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	cl := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", e.b.URL+"/v1/audit", nil)
	req.Header.Set("Authorization", "Bearer "+coretest.Token)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 1024)
	if _, err := br.ReadByte(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	var last string
	lines := 0
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			last, lines = line, lines+1
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the export: %v", err)
		}
	}
	if lines >= exportRecords {
		t.Fatalf("the export completed (%d lines) before the store stopped: the test proves nothing", lines)
	}
	if !strings.Contains(last, `"incomplete":true`) || !strings.Contains(last, httpapi.IncompleteMarker) {
		t.Errorf("last line of a failed export: %q", last)
	}
	if tr := resp.Trailer.Get(httpapi.AuditErrorTrailer); !strings.Contains(tr, httpapi.IncompleteMarker) {
		t.Errorf("trailer %s = %q", httpapi.AuditErrorTrailer, tr)
	}
}
