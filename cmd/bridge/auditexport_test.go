package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// stopOnFirstWrite stops the etcd member at the first write of the
// export's output, then keeps what it is given.
type stopOnFirstWrite struct {
	once sync.Once
	srv  *etcdtest.Server
	buf  bytes.Buffer // not embedded: io.Copy would use its ReadFrom
}

func (w *stopOnFirstWrite) Write(b []byte) (int, error) {
	w.once.Do(w.srv.Stop)
	return w.buf.Write(b)
}

// TestAuditExportIncompleteExitsNonZero: `bridge audit export` of an export
// whose store fails after its first byte fails, naming the incomplete
// export (the daemon's trailer), and its output ends with the marker line.
func TestAuditExportIncompleteExitsNonZero(t *testing.T) {
	srv := etcdtest.Start(t)
	st, err := etcd.New(srv.Client(t), etcd.Options{Prefix: "/t", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	dir := t.TempDir()
	cfgText := fmt.Sprintf("owner: acme\ndata_dir: %s\nhttp: {api_token: %s}\n"+
		"rooms:\n  - {name: main, console: true, agents: [coder]}\nagents:\n  coder: {kind: exec, command: [demo]}\n", dir, coretest.Token)
	b := coretest.Start(t, coretest.Options{Config: cfgText, Dir: dir, Store: st, Idle: true})
	coretest.FillAudit(t, st, 1000, 8<<10) // 8 MB: more than the socket buffers hold (see below)
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, cfgText)
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	apiTransport = &http.Transport{DialContext: d.DialContext}
	t.Cleanup(func() { apiTransport = nil })
	out := &stopOnFirstWrite{srv: srv}
	var stderr bytes.Buffer
	err = auditExport(t.Context(), []string{"--config", cfg, "--api", b.URL}, out, &stderr)
	if err == nil || !strings.Contains(err.Error(), httpapi.IncompleteMarker) {
		t.Fatalf("audit export of a failing store: %v, want an error saying it is incomplete", err)
	}
	lines := strings.Split(strings.TrimSpace(out.buf.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"incomplete":true`) {
		t.Errorf("last line %q (of %d)", last, len(lines))
	}
}
