package core_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/core/coretest"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/store"
)

func getBackup(t *testing.T, b *coretest.Bridge) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.URL+"/v1/store/backup", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+coretest.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// TestBackupOutlastsTheReadWait: a backup read by a client that stalls
// longer than the API's read wait (a slow link) still comes whole: the
// stream has no deadline of its own, only the write timeout between two
// writes.
func TestBackupOutlastsTheReadWait(t *testing.T) {
	b := coretest.Start(t, coretest.Options{Config: testConfig, Dir: t.TempDir(), Idle: true})
	coretest.FillAudit(t, b.DB, 1000, 8<<10) // 8 MB: more than the sockets' buffers hold
	resp := getBackup(t, b)
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, resp.Body, 64<<10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(httpapi.ReadWait + time.Second) // the client stalls; the bridge's writes wait
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		t.Fatalf("reading the rest after a stall: %v", err)
	}
	info, err := store.ReadBackup(bytes.NewReader(buf.Bytes()))
	if err != nil || info.Records < 1000 {
		t.Fatalf("the backup, read with a stall of %v: %+v, %v; want it whole", httpapi.ReadWait+time.Second, info, err)
	}
}

// TestBackupFailureIsAnError: a backup that fails before it sent anything
// (a store holding an unfinished restore) is answered with an error status
// and the reason, not 200 and an empty body.
func TestBackupFailureIsAnError(t *testing.T) {
	b := coretest.Start(t, coretest.Options{Config: testConfig, Dir: t.TempDir(), Idle: true})
	if err := b.DB.Update(t.Context(), func(tx store.Tx) error { return tx.Put(store.MetaBucket, store.RestoringKey, []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	resp := getBackup(t, b)
	var e struct{ Error string }
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
		!strings.Contains(e.Error, "restore into this store did not finish") {
		t.Errorf("a backup of a store holding an unfinished restore: HTTP %d %s; want 503 with the reason", resp.StatusCode, body)
	}
}
