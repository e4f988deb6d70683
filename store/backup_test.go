package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
)

func openBolt(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// backupWith backs up a store of format 1 holding the keys of kv.
func backupWith(t *testing.T, kv map[string]string) []byte {
	t.Helper()
	src := openBolt(t)
	ctx := context.Background()
	if err := src.Update(ctx, func(tx store.Tx) error {
		if err := store.WriteFormat(tx, 1); err != nil {
			return err
		}
		for k, v := range kv {
			if err := tx.Put("requests", k, []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := store.Backup(ctx, src, time.Now(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// resum gives file (its header and records changed) a trailer whose
// checksum and count match again, as a hand edit that knows the format
// would: what the checksum cannot catch, the trailer's other checks must.
func resum(t *testing.T, file []byte, edit func(end map[string]any)) []byte {
	t.Helper()
	lines := bytes.SplitAfter(bytes.TrimSuffix(file, []byte("\n")), []byte("\n"))
	body, last := bytes.Join(lines[:len(lines)-1], nil), lines[len(lines)-1]
	var rec struct{ End map[string]any }
	if err := json.Unmarshal(last, &rec); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	rec.End["sha256"] = hex.EncodeToString(sum[:])
	edit(rec.End)
	end, err := json.Marshal(map[string]any{"end": rec.End})
	if err != nil {
		t.Fatal(err)
	}
	return append(append(body, end...), '\n')
}

// TestBackupTrailerChecked: a trailer that disagrees with the records it
// closes (the format a restore writes, a bucket's count) is refused before
// anything is written, even with a checksum that matches.
func TestBackupTrailerChecked(t *testing.T) {
	file := backupWith(t, map[string]string{"R1": "x"})
	for name, bad := range map[string][]byte{
		"format": resum(t, file, func(end map[string]any) { end["format"] = 2 }),
		"bucket": resum(t, file, func(end map[string]any) { end["buckets"] = map[string]int{"meta": 1, "audit": 1} }),
	} {
		dst := openBolt(t)
		_, err := store.Restore(context.Background(), dst, bytes.NewReader(bad), store.RestoreOptions{})
		if err == nil || !strings.Contains(err.Error(), "altered or is damaged") {
			t.Errorf("%s: Restore of a backup whose trailer was edited: %v; want a refusal", name, err)
		}
		_ = dst.View(context.Background(), func(tx store.Tx) error {
			if f, _ := store.ReadFormat(tx); f != 0 {
				t.Errorf("%s: the refused restore wrote format %d", name, f)
			}
			return nil
		})
	}
	if _, err := store.ReadBackup(bytes.NewReader(resum(t, file, func(map[string]any) {}))); err != nil {
		t.Errorf("the same file, its trailer rewritten unchanged: %v", err)
	}
}

// TestBackupKeepsKeyBytes: keys that are not valid UTF-8 (an API client's
// Idempotency-Key is kept as sent) come back byte for byte.
func TestBackupKeepsKeyBytes(t *testing.T) {
	keys := map[string]string{"k\xff\xfe": "a", "k\xff\xfd": "b", "plain": "c"}
	file := backupWith(t, keys)
	dst := openBolt(t)
	if _, err := store.Restore(context.Background(), dst, bytes.NewReader(file), store.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	_ = dst.View(context.Background(), func(tx store.Tx) error {
		return tx.Scan("requests", "", "", func(k string, v []byte) error { got[k] = string(v); return nil })
	})
	if len(got) != len(keys) {
		t.Errorf("restored %q, want %q", got, keys)
	}
	for k, v := range keys {
		if got[k] != v {
			t.Errorf("key %q restored as %q, want %q", k, got[k], v)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestBackupFileRefusals: what is not a backup, or not a whole one, is
// refused with what is wrong, and a file without line breaks is not read
// into memory whole.
func TestBackupFileRefusals(t *testing.T) {
	file := backupWith(t, map[string]string{"R1": "x"})
	header := file[:bytes.IndexByte(file, '\n')+1]
	for name, c := range map[string]struct {
		r    io.Reader
		want string
	}{
		"empty":     {bytes.NewReader(nil), "the file is empty"},
		"mid-line":  {bytes.NewReader(file[:len(file)-10]), "ends in the middle of a line"},
		"version":   {bytes.NewReader(bytes.Replace(file, []byte(`"version":2`), []byte(`"version":9`), 1)), "reads versions 1 to 2"},
		"no header": {bytes.NewReader([]byte("{}\n")), "not a roombridge backup"},
		"long line": {io.MultiReader(bytes.NewReader(header), io.LimitReader(zeros{}, 64<<20)), "a line longer than"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := store.ReadBackup(c.r)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 48<<20 {
			t.Errorf("%s: reading it allocated %d MiB", name, grew>>20)
		}
	}
}

// TestBackupVersion1Read: a file of the first backup format (no key bytes)
// still reads.
func TestBackupVersion1Read(t *testing.T) {
	file := backupWith(t, map[string]string{"R1": "x"})
	v1 := resum(t, bytes.Replace(file, []byte(`"version":2`), []byte(`"version":1`), 1), func(map[string]any) {})
	if info, err := store.ReadBackup(bytes.NewReader(v1)); err != nil || info.Records != 2 {
		t.Errorf("a version 1 backup: %+v, %v; want its 2 records", info, err)
	}
}
