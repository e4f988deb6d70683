package store

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"time"
	"unicode/utf8"
)

// Dumper is a store that can read every key of every bucket in one
// consistent snapshot (bolt: one read transaction; etcd: a range read of the
// prefix at one revision). Backups are made from it.
type Dumper interface {
	// Dump calls fn for every key, bucket by bucket in byte order, keys in
	// byte order, all as of one instant. value is valid only during fn.
	// fn returning ErrStop ends the dump without error.
	Dump(ctx context.Context, fn func(bucket, key string, value []byte) error) error
}

// RestoringKey, in MetaBucket, marks a store a restore is writing: it is
// written first and deleted with the last batch, together with FormatKey.
// A store that holds it is refused at start and by a backup (ReadFormat
// answers ErrRestoring): a restore did not finish.
const RestoringKey = "restoring"

// backupMagic names the file format of a backup (its first line).
const backupMagic = "roombridge-backup"

// backupVersion is the version of the backup file format (not the store's):
// 2 added "kb", the bytes of a key that is not valid UTF-8. Version 1 files
// are read too.
const backupVersion = 2

// maxBackupLine bounds a line of a backup: a record holds one value, which
// no store keeps over a few MiB (etcd refuses requests over 1.5 MiB), in
// base64 with its bucket and key.
const maxBackupLine = 16 << 20

// BackupInfo describes a backup: what its header and trailer say.
type BackupInfo struct {
	// Taken is when the backup started.
	Taken time.Time `json:"taken"`
	// Format is the store format the backup holds (0: an empty store).
	Format int `json:"format"`
	// Records counts the keys, all buckets together.
	Records int `json:"records"`
	// Buckets counts the keys of each bucket.
	Buckets map[string]int `json:"buckets"`
}

// The lines of a backup file: a header, one record a key, a trailer that
// carries the count and the SHA-256 of every line before it, so that a
// truncated or altered backup is refused before anything is restored.
type (
	backupHeader struct {
		Magic   string    `json:"magic"`
		Version int       `json:"version"`
		Taken   time.Time `json:"taken"`
	}
	backupRecord struct {
		Bucket string `json:"b,omitempty"`
		Key    string `json:"k,omitempty"`
		// KeyBytes holds a key that is not valid UTF-8 (Key is then
		// empty): a JSON string would replace its bytes.
		KeyBytes []byte         `json:"kb,omitempty"`
		Value    []byte         `json:"v,omitempty"`
		End      *backupTrailer `json:"end,omitempty"`
	}
	backupTrailer struct {
		Format  int            `json:"format"`
		Records int            `json:"records"`
		Buckets map[string]int `json:"buckets"`
		SHA256  string         `json:"sha256"`
	}
)

// Backup writes a consistent snapshot of st (which must be a Dumper) to w:
// JSON lines, a header, one line a key, a trailer with the count and a
// checksum. The bridge may go on writing while it runs: the snapshot is of
// one instant. A store that a restore left unfinished is refused.
func Backup(ctx context.Context, st Store, now time.Time, w io.Writer) (BackupInfo, error) {
	d, ok := st.(Dumper)
	if !ok {
		return BackupInfo{}, fmt.Errorf("store: backup: %T cannot take a snapshot", st)
	}
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 1<<16)
	enc := json.NewEncoder(bw)
	info := BackupInfo{Taken: now.UTC(), Format: 0, Buckets: map[string]int{}}
	if err := enc.Encode(backupHeader{Magic: backupMagic, Version: backupVersion, Taken: info.Taken}); err != nil {
		return info, fmt.Errorf("store: backup: %w", err)
	}
	sawData := false
	err := d.Dump(ctx, func(bucket, key string, value []byte) error {
		if bucket == MetaBucket && key == RestoringKey {
			return ErrRestoring
		}
		if bucket == MetaBucket && key == FormatKey {
			f, err := parseFormat(value)
			if err != nil {
				return err
			}
			info.Format = f
		} else {
			sawData = true
		}
		info.Records++
		info.Buckets[bucket]++
		rec := backupRecord{Bucket: bucket, Key: key, Value: value}
		if !utf8.ValidString(key) {
			rec.Key, rec.KeyBytes = "", []byte(key)
		}
		return enc.Encode(rec)
	})
	if err != nil {
		return info, fmt.Errorf("store: backup: %w", err)
	}
	if info.Format == 0 && sawData {
		info.Format = UnversionedFormat
	}
	if err := bw.Flush(); err != nil {
		return info, fmt.Errorf("store: backup: %w", err)
	}
	end := backupTrailer{Format: info.Format, Records: info.Records, Buckets: info.Buckets, SHA256: hex.EncodeToString(sum.Sum(nil))}
	if err := json.NewEncoder(w).Encode(backupRecord{End: &end}); err != nil {
		return info, fmt.Errorf("store: backup: %w", err)
	}
	return info, nil
}

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// BatchKeys bounds the keys one Update writes (default 4,096; a store
	// with MaxWrites and MaxWriteBytes methods, etcd, is kept within them,
	// less what the restore writes itself).
	BatchKeys int
	// Progress, if set, is called after each batch with the keys written.
	Progress func(done, total int)
	// Finish, if set, runs in the last batch's transaction, once every key
	// and the format are written: the restore's audit record.
	Finish func(tx Tx, info BackupInfo) error
}

// ReadBackup checks a backup from r (whole: header, every line, the
// trailer's count and checksum) and returns what it holds. Nothing is
// written.
func ReadBackup(r io.Reader) (BackupInfo, error) {
	return readBackup(r, nil)
}

// Restore writes the backup r holds into st, which must be empty. The backup
// is checked whole first (ReadBackup), so a truncated or altered file writes
// nothing. The restore marks the store (MetaBucket/RestoringKey) in its first
// batch and clears the mark in its last, with the backup's format: a restore
// cut off halfway leaves a store that is refused at start, never one that
// looks whole.
func Restore(ctx context.Context, st Store, r io.ReadSeeker, o RestoreOptions) (BackupInfo, error) {
	info, err := ReadBackup(r)
	if err != nil {
		return info, err
	}
	if err := mustBeEmpty(ctx, st); err != nil {
		return info, err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return info, fmt.Errorf("store: restore: %w", err)
	}
	w := &restoreWriter{ctx: ctx, st: st, maxKeys: o.BatchKeys, total: info.Records, progress: o.Progress}
	w.limit()
	if _, err := readBackup(r, w.add); err != nil {
		return info, err
	}
	if err := w.finish(info, o.Finish); err != nil {
		return info, err
	}
	return info, nil
}

// mustBeEmpty refuses a store that holds any key.
func mustBeEmpty(ctx context.Context, st Store) error {
	d, ok := st.(Dumper)
	if !ok {
		return fmt.Errorf("store: restore: %T cannot be checked for emptiness", st)
	}
	var first string
	err := d.Dump(ctx, func(bucket, key string, _ []byte) error {
		first = bucket + "/" + key
		return ErrStop
	})
	if err != nil {
		return fmt.Errorf("store: restore: %w", err)
	}
	if first != "" {
		return fmt.Errorf("store: restore: the target store is not empty (it holds %s): restore into an empty data_dir or etcd prefix", first)
	}
	return nil
}

// readBackup reads a backup line by line, calling add (if set) for each key,
// and checks the trailer.
func readBackup(r io.Reader, add func(bucket, key string, value []byte) error) (BackupInfo, error) {
	fail := func(format string, args ...any) (BackupInfo, error) {
		return BackupInfo{}, fmt.Errorf("store: backup file: "+format, args...)
	}
	sum := sha256.New()
	br := bufio.NewReaderSize(r, 1<<16)
	line, err := nextLine(br, sum, 4<<10)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fail("the file is empty: not a roombridge backup")
	}
	if err != nil {
		return fail("reading the header: %v", err)
	}
	var h backupHeader
	if err := json.Unmarshal(line, &h); err != nil || h.Magic != backupMagic {
		return fail("not a roombridge backup (its first line is no %s header)", backupMagic)
	}
	if h.Version < 1 || h.Version > backupVersion {
		return fail("version %d, this binary reads versions 1 to %d: restore it with the bridge binary that wrote it, or a newer one", h.Version, backupVersion)
	}
	seen := backupSeen{count: map[string]int{}}
	for n := 1; ; n++ {
		line, err := nextLine(br, nil, maxBackupLine)
		if err != nil {
			return fail("line %d: %v (the file is truncated: no trailer)", n+1, err)
		}
		var rec backupRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return fail("line %d: %v", n+1, err)
		}
		if rec.End != nil {
			return seen.checkTrailer(h, rec.End, n-1, sum, br)
		}
		sum.Write(line)
		key := rec.Key
		if rec.KeyBytes != nil {
			key = string(rec.KeyBytes)
		}
		if rec.Bucket == "" || key == "" {
			return fail("line %d: a record without bucket or key", n+1)
		}
		if err := seen.add(rec.Bucket, key, rec.Value); err != nil {
			return fail("line %d: %v", n+1, err)
		}
		if add != nil {
			if err := add(rec.Bucket, key, rec.Value); err != nil {
				return BackupInfo{}, err
			}
		}
	}
}

// nextLine reads one line (with its newline) of at most limit bytes,
// adding it to sum if set. A last line without its newline is a truncated
// file.
func nextLine(br *bufio.Reader, sum hash.Hash, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > limit {
			return nil, fmt.Errorf("a line longer than %d bytes: not a backup line", limit)
		}
		if len(line)+len(frag) > cap(line) { // doubling: what grows to limit allocates 2 limits
			line = append(make([]byte, 0, max(2*cap(line), len(line)+len(frag))), line...)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			if sum != nil {
				sum.Write(line)
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.ErrUnexpectedEOF
		case err == io.EOF:
			return nil, errors.New("the file ends in the middle of a line")
		default:
			return nil, err
		}
	}
}

// backupSeen is what a backup's records held: the keys of each bucket and
// the store format they make (as Backup derives it).
type backupSeen struct {
	count   map[string]int
	format  int
	sawData bool
}

func (b *backupSeen) add(bucket, key string, value []byte) error {
	b.count[bucket]++
	if bucket != MetaBucket || key != FormatKey {
		b.sawData = true
		return nil
	}
	f, err := parseFormat(value)
	b.format = f
	return err
}

// checkTrailer compares the trailer with what was read: the checksum of
// every line before it, the count of records and of each bucket's, the
// format; nothing may follow it.
func (b *backupSeen) checkTrailer(h backupHeader, end *backupTrailer, records int, sum hash.Hash, br *bufio.Reader) (BackupInfo, error) {
	fail := func(format string, args ...any) (BackupInfo, error) {
		return BackupInfo{}, fmt.Errorf("store: backup file: "+format+" (the file was altered or is damaged)", args...)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != end.SHA256 {
		return fail("checksum mismatch")
	}
	if records != end.Records {
		return fail("%d records, the trailer says %d", records, end.Records)
	}
	if !maps.Equal(b.count, end.Buckets) && (len(b.count) > 0 || len(end.Buckets) > 0) {
		return fail("the records' buckets %v, the trailer says %v", b.count, end.Buckets)
	}
	format := b.format
	if format == 0 && b.sawData {
		format = UnversionedFormat
	}
	if format != end.Format {
		return fail("the records are of store format %d, the trailer says %d", format, end.Format)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return BackupInfo{}, fmt.Errorf("store: backup file: data after the trailer")
	}
	return BackupInfo{Taken: h.Taken, Format: end.Format, Records: records, Buckets: b.count}, nil
}

// restoreWriter writes a backup's keys in batches.
type restoreWriter struct {
	ctx            context.Context
	st             Store
	maxKeys, bytes int // a batch's bounds (limit), and the pending keys' bytes
	maxBytes       int // 0: none
	pending        []backupRecord
	done, total    int
	started        bool
	progress       func(done, total int)
}

// restoreOwnWrites is the keys a restore's batches write beside the
// backup's: the mark in the first; the format, the mark's deletion and the
// audit record (a counter, the record, its index) of Finish in the last.
const restoreOwnWrites = 6

// limit sizes the batches: BatchKeys (default 4,096) and, on a store that
// bounds a transaction (etcd: MaxWrites, MaxWriteBytes), within it less
// what the restore writes itself.
func (w *restoreWriter) limit() {
	if w.maxKeys <= 0 {
		w.maxKeys = 4096
	}
	if m, ok := w.st.(interface{ MaxWrites() int }); ok {
		w.maxKeys = max(1, min(w.maxKeys, m.MaxWrites()-restoreOwnWrites))
	}
	if m, ok := w.st.(interface{ MaxWriteBytes() int }); ok {
		w.maxBytes = m.MaxWriteBytes() * 3 / 4 // the rest: prefixes, the audit record
	}
}

func (w *restoreWriter) add(bucket, key string, value []byte) error {
	if bucket == MetaBucket && key == FormatKey {
		return nil // written last (finish)
	}
	size := len(bucket) + len(key) + len(value) + 2
	if len(w.pending) > 0 && (len(w.pending) >= w.maxKeys || w.maxBytes > 0 && w.bytes+size > w.maxBytes) {
		if err := w.flush(nil); err != nil {
			return err
		}
	}
	w.pending = append(w.pending, backupRecord{Bucket: bucket, Key: key, Value: value})
	w.bytes += size
	return nil
}

// flush writes the pending keys; the first batch also checks that nothing
// wrote to the store since it was found empty (a bridge that began leading
// stamps its format: on etcd the check is part of the transaction) and
// marks the store as being restored; last (if set) runs in the same
// transaction.
func (w *restoreWriter) flush(last func(Tx) error) error {
	recs := w.pending
	err := w.st.Update(w.ctx, func(tx Tx) error {
		if !w.started {
			if err := notStarted(tx); err != nil {
				return err
			}
			if err := tx.Put(MetaBucket, RestoringKey, []byte("1")); err != nil {
				return err
			}
		}
		for _, r := range recs {
			if err := tx.Put(r.Bucket, r.Key, r.Value); err != nil {
				return err
			}
		}
		if last != nil {
			return last(tx)
		}
		return nil
	})
	if err != nil {
		if w.started {
			return fmt.Errorf("store: restore: writing keys %d-%d of %d: %w; the target now holds part of the backup and is marked as an unfinished restore: empty it (the bolt file, or the etcd prefix) and restore again", w.done+1, w.done+len(recs), w.total, err)
		}
		return fmt.Errorf("store: restore: writing keys %d-%d of %d: %w", w.done+1, w.done+len(recs), w.total, err)
	}
	w.started = true
	w.done += len(recs)
	w.pending, w.bytes = w.pending[:0], 0
	if w.progress != nil {
		w.progress(w.done, w.total)
	}
	return nil
}

// notStarted refuses a store that holds a format or a restore's mark: a
// bridge or another restore wrote to it since it was found empty.
func notStarted(tx Tx) error {
	for _, k := range []string{FormatKey, RestoringKey} {
		_, err := tx.Get(MetaBucket, k)
		if err == nil {
			return fmt.Errorf("the target store is no longer empty (it holds %s/%s: a bridge or another restore wrote to it meanwhile): stop every bridge on it and restore into an empty data_dir or etcd prefix", MetaBucket, k)
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// finish writes the last batch with the format, clears the mark and runs
// done (if set) in the same transaction.
func (w *restoreWriter) finish(info BackupInfo, done func(Tx, BackupInfo) error) error {
	return w.flush(func(tx Tx) error {
		if info.Format > 0 {
			if err := WriteFormat(tx, info.Format); err != nil {
				return err
			}
		}
		if err := tx.Delete(MetaBucket, RestoringKey); err != nil {
			return err
		}
		if done != nil {
			return done(tx, info)
		}
		return nil
	})
}
