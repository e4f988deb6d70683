package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/store"
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
	err = run(t.Context(), []string{"audit", "export", "--config", cfg, "--api", b.URL}, out, &stderr)
	if err == nil || !strings.Contains(err.Error(), httpapi.IncompleteMarker) {
		t.Fatalf("audit export of a failing store: %v, want an error saying it is incomplete", err)
	}
	lines := strings.Split(strings.TrimSpace(out.buf.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"incomplete":true`) {
		t.Errorf("last line %q (of %d)", last, len(lines))
	}
}

// TestAuditExportFile: `bridge audit export -o FILE` creates FILE with mode
// 0600 and leaves an existing file's mode alone; --format is read in any
// case; a file it cannot create is one error naming the operation and the
// file once; a CSV cell that would be a spreadsheet formula is text.
func TestAuditExportFile(t *testing.T) {
	dir := t.TempDir()
	cfgText := fmt.Sprintf("owner: acme\ndata_dir: %s\nhttp: {api_token: %s}\n"+
		"rooms:\n  - {name: main, console: true, agents: [coder]}\nagents:\n  coder: {kind: exec, command: [demo]}\n", dir, coretest.Token)
	b := coretest.Start(t, coretest.Options{Config: cfgText, Dir: dir, Idle: true})
	if err := b.DB.Update(t.Context(), func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{Time: time.Now(), Actor: "slack:U1", Action: "note", Detail: "=HYPERLINK(\"http://evil\")"})
	}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, cfgText)
	export := func(args ...string) error {
		return run(t.Context(), append([]string{"audit", "export", "--config", cfg, "--api", b.URL}, args...), io.Discard, io.Discard)
	}

	out := filepath.Join(dir, "audit.out")
	if err := export("--format", "CSV", "-o", out); err != nil {
		t.Fatalf("audit export --format CSV: %v", err)
	}
	got, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(got), "seq,time,request_id") || !strings.Contains(string(got), `'=HYPERLINK(""http://evil"")`) {
		t.Errorf("export --format CSV wrote %q: want CSV with the formula as text", got)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("-o %s: mode %v (%v), want 0600", out, st.Mode().Perm(), err)
	}
	if err := export("--format", "Jsonl", "-o", filepath.Join(dir, "x.CSV")); err == nil || !errors.Is(err, errUsage) {
		t.Errorf("--format Jsonl -o x.CSV: %v, want a usage error", err)
	}

	existing := filepath.Join(dir, "existing.jsonl")
	writeFile(t, existing, "old")
	if err := os.Chmod(existing, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := export("-o", existing); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(existing); st.Mode().Perm() != 0o640 {
		t.Errorf("-o an existing file of mode 0640: now %v", st.Mode().Perm())
	}

	missing := filepath.Join(dir, "no-such-dir", "audit.csv")
	err := export("-o", missing)
	if err == nil || err.Error() != "audit export: open "+missing+": no such file or directory" {
		t.Errorf("-o into a missing directory: %v, want one error naming the operation and the file once", err)
	}
}
