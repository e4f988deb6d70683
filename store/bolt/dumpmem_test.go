package bolt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

// rssFileKB is the process's file-backed resident memory (the pages of
// mapped files it touched), in kB.
func rssFileKB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("RssFile %q: %v", v, err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestDumpReleasesWhatItRead: a dump (a backup) of a file much larger than
// its release bound does not keep the pages it read resident: the file's
// resident share stays bounded, not the file's size.
func TestDumpReleasesWhatItRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bridge.db")
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	v := []byte(strings.Repeat("x", 8<<10))
	const keys = 12_000 // 94 MiB of values
	for i := 0; i < keys; i += 400 {
		if err := db.Update(context.Background(), func(tx store.Tx) error {
			for j := i; j < i+400; j++ {
				if err := tx.Put("audit", fmt.Sprintf("k%06d", j), v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = bolt.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	base, peak, n := rssFileKB(t), 0, 0
	err = db.Dump(context.Background(), func(_, _ string, v []byte) error {
		if n++; n%500 == 0 {
			peak = max(peak, rssFileKB(t)-base)
		}
		return nil
	})
	if err != nil || n != keys {
		t.Fatalf("Dump: %d keys, %v; want %d", n, err, keys)
	}
	if peak > 48<<10 {
		t.Errorf("a dump of %d MiB held up to %d MiB of the file resident; want it bounded (under 48 MiB)", keys*len(v)>>20, peak>>10)
	}
	t.Logf("peak resident share of the file during the dump: %d MiB", peak>>10)
}

// TestWritesGoOnDuringADump: while a dump (a backup streamed to a slow
// client) holds its read transaction on a store past 16 MiB, writes that
// grow the file well past what it held commit, and the dump still sees the
// store as it was.
func TestWritesGoOnDuringADump(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bridge.db")
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := []byte(strings.Repeat("x", 64<<10))
	put := func(bucket string, n int) error {
		for i := range n {
			if err := db.Update(ctx, func(tx store.Tx) error { return tx.Put(bucket, fmt.Sprintf("k%04d", i), v) }); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put("before", 288); err != nil { // 18 MiB
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = bolt.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seen := 0
	err = db.Dump(ctx, func(_, _ string, _ []byte) error {
		if seen++; seen > 1 {
			return nil
		}
		done := make(chan error, 1)
		go func() { done <- put("during", 512) }() // 32 MiB
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			return fmt.Errorf("32 MiB of writes did not commit within 20s of a dump's read transaction: writes wait for it")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 288 {
		t.Errorf("the dump saw %d keys, want the 288 before it began", seen)
	}
}

// TestNewStoreIsSmall: a new store's file holds its data, not a growth step
// ahead of it (a 16 MiB file for a few keys).
func TestNewStoreIsSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bridge.db")
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 100 {
		if err := db.Update(context.Background(), func(tx store.Tx) error { return tx.Put("requests", fmt.Sprint(i), make([]byte, 300)) }); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Size() > 1<<20 {
		t.Errorf("a store of 100 small keys: %v bytes (%v); want under 1 MiB", st.Size(), err)
	}
}
