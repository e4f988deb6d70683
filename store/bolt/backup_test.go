package bolt_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// BenchmarkBackupRestore backs up, then restores, a bolt store of 100,000
// keys of 300 bytes (about a store of 10,000 requests with their records):
// one op is one backup and one restore.
func BenchmarkBackupRestore(b *testing.B) {
	src, err := bolt.Open(filepath.Join(b.TempDir(), "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	v := bytes.Repeat([]byte("x"), 300)
	for i := 0; i < 100_000; i += 1000 {
		if err := src.Update(context.Background(), func(tx store.Tx) error {
			for j := i; j < i+1000; j++ {
				if err := tx.Put("requests", fmt.Sprintf("R%08d", j), v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		t0 := time.Now()
		if _, err := store.Backup(context.Background(), src, time.Now(), &buf); err != nil {
			b.Fatal(err)
		}
		backup := time.Since(t0)
		t0 = time.Now()
		if _, err := bolt.Restore(context.Background(), filepath.Join(b.TempDir(), fmt.Sprint(i), "bridge.db"), bytes.NewReader(buf.Bytes()), store.RestoreOptions{}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(backup.Milliseconds()), "backup-ms")
		b.ReportMetric(float64(time.Since(t0).Milliseconds()), "restore-ms")
	}
	b.ReportMetric(float64(buf.Len())/(1<<20), "MiB")
}
