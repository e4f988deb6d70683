package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
)

// dumpAll returns every key of s as "bucket/key" -> value.
func dumpAll(t *testing.T, s store.Store) map[string]string {
	t.Helper()
	d, ok := s.(store.Dumper)
	if !ok {
		t.Fatalf("%T is not a store.Dumper", s)
	}
	out := map[string]string{}
	if err := d.Dump(context.Background(), func(b, k string, v []byte) error {
		out[b+"/"+k] = string(v)
		return nil
	}); err != nil {
		t.Fatalf("Dump: %v", err)
	}
	return out
}

// testBackupRestore: a backup is the store as of one instant (writes after it
// are not in it), a restore into an empty store gives back every key and
// value byte for byte, and a damaged backup or a store that is not empty is
// refused with nothing written.
func testBackupRestore(t *testing.T, open Opener) {
	src := mustOpen(t, open(t))
	fillBackupSource(t, src)
	checkDumpIsOneInstant(t, src)
	want := dumpAll(t, src)
	full := backupOf(t, src)
	update(t, src, func(tx store.Tx) error { return tx.Put("bucket0", "after", []byte("x")) })

	var dst store.Store
	t.Run("target", func(t *testing.T) { dst = open(t)() })
	defer dst.Close()
	checkDamagedRefused(t, dst, full)
	restoreFinished(t, dst, full)
	checkRestored(t, dst, want)
	// Not into a store that holds data.
	_, err := store.Restore(context.Background(), dst, bytes.NewReader(full), store.RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Restore into a store with data: %v, want a not-empty refusal", err)
	}
}

// fillBackupSource writes format 7, an empty value and 600 keys over three
// buckets into src.
func fillBackupSource(t *testing.T, src store.Store) {
	t.Helper()
	update(t, src, func(tx store.Tx) error {
		if err := store.WriteFormat(tx, 7); err != nil {
			return err
		}
		return tx.Put("empty", "k", nil)
	})
	for i := 0; i < 600; i += 100 { // within one etcd Txn each
		update(t, src, func(tx store.Tx) error {
			for j := i; j < i+100; j++ {
				if err := tx.Put(fmt.Sprintf("bucket%d", j%3), fmt.Sprintf("k%04d", j), []byte(fmt.Sprintf("v\x00\xff%d", j))); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// checkDumpIsOneInstant: writes made while a dump runs (committed before
// it reads the keys they touch) are not in it: a new key, a changed one
// and a deleted one are seen as they were when the dump began. The writes
// are undone after.
func checkDumpIsOneInstant(t *testing.T, src store.Store) {
	t.Helper()
	ctx := context.Background()
	got := map[string]string{}
	first := true
	err := src.(store.Dumper).Dump(ctx, func(b, k string, v []byte) error {
		if first {
			first = false
			if err := src.Update(ctx, func(tx store.Tx) error {
				if err := tx.Put("bucket0", "k9999", []byte("during")); err != nil {
					return err
				}
				if err := tx.Put("bucket2", "k0599", []byte("during")); err != nil {
					return err
				}
				return tx.Delete("bucket1", "k0598")
			}); err != nil {
				return err
			}
		}
		got[b+"/"+k] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("Dump with writes during it: %v", err)
	}
	if _, ok := got["bucket0/k9999"]; ok {
		t.Error("a dump holds a key written after it began")
	}
	if v := got["bucket2/k0599"]; v != "v\x00\xff599" {
		t.Errorf("a dump holds bucket2/k0599 = %q, changed after it began; want the value before", v)
	}
	if _, ok := got["bucket1/k0598"]; !ok {
		t.Error("a dump lacks a key deleted after it began")
	}
	update(t, src, func(tx store.Tx) error {
		if err := tx.Delete("bucket0", "k9999"); err != nil {
			return err
		}
		if err := tx.Put("bucket2", "k0599", []byte("v\x00\xff599")); err != nil {
			return err
		}
		return tx.Put("bucket1", "k0598", []byte("v\x00\xff598"))
	})
}

// backupOf backs src up, checks the backup's info against what
// fillBackupSource wrote, and returns the backup.
func backupOf(t *testing.T, src store.Store) []byte {
	t.Helper()
	var buf bytes.Buffer
	info, err := store.Backup(context.Background(), src, time.Unix(1e9, 0), &buf)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if info.Format != 7 || info.Records != 602 || info.Buckets["bucket1"] != 200 {
		t.Errorf("Backup: %+v, want format 7, 602 records, 200 in bucket1", info)
	}
	return buf.Bytes()
}

// checkDamagedRefused: damaged versions of the backup full are refused and
// write nothing into dst.
func checkDamagedRefused(t *testing.T, dst store.Store, full []byte) {
	t.Helper()
	for name, bad := range map[string][]byte{
		"truncated": full[:len(full)/2],
		"altered":   bytes.Replace(full, []byte(`"k0005"`), []byte(`"k0006"`), 1),
		"trailing":  append(bytes.Clone(full), []byte("{}\n")...),
	} {
		if _, err := store.Restore(context.Background(), dst, bytes.NewReader(bad), store.RestoreOptions{}); err == nil {
			t.Errorf("Restore of a %s backup: no error", name)
		}
		if got := dumpAll(t, dst); len(got) != 0 {
			t.Fatalf("Restore of a %s backup wrote %d keys", name, len(got))
		}
	}
}

// restoreFinished restores full into dst in batches of 100 keys and checks
// that the progress reached 601 and that Finish ran last, in the last
// transaction (its write is removed again).
func restoreFinished(t *testing.T, dst store.Store, full []byte) {
	t.Helper()
	var progress int
	if _, err := store.Restore(context.Background(), dst, bytes.NewReader(full), store.RestoreOptions{BatchKeys: 100,
		Progress: func(done, total int) { progress = done },
		Finish: func(tx store.Tx, info store.BackupInfo) error {
			// Last: every key is there, the mark is gone.
			if _, err := tx.Get("bucket2", "k0599"); err != nil {
				return fmt.Errorf("finish ran before the last key: %w", err)
			}
			if _, err := tx.Get(store.MetaBucket, store.RestoringKey); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("finish ran with the restore's mark still there: %v", err)
			}
			return tx.Put("finish", "done", []byte(fmt.Sprint(info.Records)))
		}}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	update(t, dst, func(tx store.Tx) error {
		if v, err := tx.Get("finish", "done"); err != nil || string(v) != "602" {
			t.Errorf("Finish's write: %q, %v; want 602 (the backup's count)", v, err)
		}
		return tx.Delete("finish", "done") // the comparison below is of the backup's keys
	})
	if progress != 601 { // the format key is written with the last batch, not counted
		t.Errorf("Restore's progress ended at %d, want 601", progress)
	}
}

// checkRestored: dst holds exactly the keys and values of want, and format 7.
func checkRestored(t *testing.T, dst store.Store, want map[string]string) {
	t.Helper()
	got := dumpAll(t, dst)
	if len(got) != len(want) {
		t.Errorf("restored %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("restored %s = %q, want %q", k, got[k], v)
		}
	}
	view(t, dst, func(tx store.Tx) error {
		f, err := store.ReadFormat(tx)
		if f != 7 || err != nil {
			t.Errorf("restored store's format: %d, %v; want 7", f, err)
		}
		return nil
	})
}

// testUnfinishedRestore: a store a restore did not finish is refused by
// ReadFormat and by Backup.
func testUnfinishedRestore(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	update(t, s, func(tx store.Tx) error {
		if err := tx.Put("requests", "R1", []byte("x")); err != nil {
			return err
		}
		return tx.Put(store.MetaBucket, store.RestoringKey, []byte("1"))
	})
	err := s.View(context.Background(), func(tx store.Tx) error { _, err := store.ReadFormat(tx); return err })
	if !errors.Is(err, store.ErrRestoring) {
		t.Errorf("ReadFormat of an unfinished restore: %v, want ErrRestoring", err)
	}
	if _, err := store.Backup(context.Background(), s, time.Now(), &bytes.Buffer{}); err == nil {
		t.Errorf("Backup of an unfinished restore: no error")
	}
}

// testFormat: an empty store has format 0, one with data but no format key
// UnversionedFormat, and a written format reads back; a newer one than a
// binary knows is a FormatError naming both.
func testFormat(t *testing.T, open func() store.Store) {
	s := mustOpen(t, open)
	read := func() int {
		t.Helper()
		var f int
		view(t, s, func(tx store.Tx) error {
			var err error
			f, err = store.ReadFormat(tx)
			return err
		})
		return f
	}
	if f := read(); f != 0 {
		t.Errorf("empty store: format %d, want 0", f)
	}
	update(t, s, func(tx store.Tx) error { return tx.Put("requests", "R1", []byte("x")) })
	if f := read(); f != store.UnversionedFormat {
		t.Errorf("store with data, no format key: format %d, want %d", f, store.UnversionedFormat)
	}
	update(t, s, func(tx store.Tx) error { return store.WriteFormat(tx, 3) })
	if f := read(); f != 3 {
		t.Errorf("format %d, want 3", f)
	}
	var fe *store.FormatError
	if err := store.CheckFormat(3, 2); !errors.As(err, &fe) || !strings.Contains(err.Error(), "format 3") || !strings.Contains(err.Error(), "format 2") {
		t.Errorf("CheckFormat(3, 2) = %v, want a FormatError naming both", err)
	}
}
