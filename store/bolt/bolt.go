// Package bolt is the embedded Store on a single bbolt file: the default for a
// single-node bridge.
package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/roombridge/roombridge/store"
	bbolt "go.etcd.io/bbolt"
	bboltErrors "go.etcd.io/bbolt/errors"
)

// maxBatch bounds how many concurrent Update calls share one commit.
const maxBatch = 256

// lockTimeout is how long Open waits for the file lock before it reports that
// another process holds the store.
const lockTimeout = time.Second

// DB is a store.Store on bbolt. Concurrent Update calls are group-committed:
// while one commit is being synced, the calls that arrive queue up and then
// share the next commit (one fsync for all of them). A sequential caller never
// waits for a batch to fill.
type DB struct {
	db *bbolt.DB
	store.Notifier

	gc *store.GroupCommit
}

var _ store.Store = (*DB)(nil)

// inUseError: another process holds the bolt file.
type inUseError struct{ path string }

func (e inUseError) Error() string {
	return fmt.Sprintf("store: bolt: %s is in use by another process (is another bridge running on this data_dir?)", e.path)
}

// InUse tells whether err is Open's "in use by another process".
func InUse(err error) bool { return errors.As(err, new(inUseError)) }

// initialMmap is the size bbolt maps a file of at least bigFile bytes at
// from the start: 10 GiB (as etcd does) on 64-bit platforms (a variable: a
// test maps files as they grow).
var initialMmap = (10 << 30) * (strconv.IntSize / 64)

// bigFile is the size from which a file is mapped at initialMmap: bbolt's
// growth step (a mapping larger than it makes bbolt grow the file a step
// ahead of its data, so a new store would be a 16 MiB file at once).
const bigFile = 16 << 20

// mmapFor is the initial mapping of the file at path. Address space, not
// memory: bbolt remaps a grown file only once every read transaction has
// ended, so with a mapping that the file outgrows a long one (a backup or
// an audit export streamed to a slow client) holds every write until it
// ends. A file under bigFile is mapped as it grows (its remaps come at
// doublings of a small file, whose backup is short); from the next start
// on, once it is bigger, its mapping has room to 10 GiB.
func mmapFor(path string) int {
	if st, err := os.Stat(path); err == nil && st.Size() >= bigFile {
		return initialMmap
	}
	return 0
}

// Open opens (creating if needed) the bolt file at path. A second process
// opening the same file fails at once with a clear error.
func Open(path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: bolt: %w", err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		// The freelist is synced with each commit: without it, every Open
		// walks (and so maps into memory) the whole file to rebuild it.
		Timeout:         lockTimeout,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: mmapFor(path),
	})
	if errors.Is(err, bboltErrors.ErrTimeout) {
		return nil, inUseError{path}
	}
	if err != nil {
		return nil, fmt.Errorf("store: bolt: open %s: %w", path, err)
	}
	d := &DB{db: db}
	d.gc = store.NewGroupCommit(maxBatch, d.commit)
	return d, nil
}

// WritesInProcess tells that every write runs on one goroutine of this
// process (the committer), so that a caller feeding it many writes at once
// (the sweeper) leaves it a processor.
func (d *DB) WritesInProcess() bool { return true }

// Path returns the bolt file's path.
func (d *DB) Path() string { return d.db.Path() }

// Bolt exposes the underlying bbolt handle (for statistics and tools).
func (d *DB) Bolt() *bbolt.DB { return d.db }

// Update implements store.Store.
func (d *DB) Update(ctx context.Context, fn func(store.Tx) error) error {
	return d.gc.Update(ctx, fn)
}

// errAbort marks a batch rolled back because one of its calls failed.
var errAbort = errors.New("bolt: batch aborted")

// commit runs the calls of batch in one bbolt transaction. When a call fails,
// the transaction is rolled back, that call gets its error, and the rest are
// run again without it: the failed call saw exactly the state its
// predecessors in the batch leave, so the outcome stays serializable.
func (d *DB) commit(batch []*store.Call) {
	for len(batch) > 0 {
		failed := -1
		var failErr error
		err := d.db.Update(func(btx *bbolt.Tx) error {
			buckets, counters, kbuf := map[string]*handle{}, map[string][]byte{}, make([]byte, 0, 64)
			for i, c := range batch {
				if err := c.Ctx.Err(); err != nil {
					failed, failErr = i, err
					return errAbort
				}
				t := &tx{btx: btx, writable: true, buckets: buckets, counters: counters, kbuf: kbuf}
				if err := c.Run(t); err != nil {
					failed, failErr = i, err
					return errAbort
				}
				c.Topics, kbuf = t.topics, t.kbuf
			}
			return (&tx{btx: btx, writable: true, buckets: buckets, counters: counters}).flushCounters()
		})
		if errors.Is(err, errAbort) {
			batch[failed].Done(failErr)
			batch = append(batch[:failed:failed], batch[failed+1:]...)
			continue
		}
		for _, c := range batch {
			if err == nil {
				d.Publish(c.Topics...)
				c.Done(nil)
			} else {
				c.Done(commitErr(err))
			}
		}
		return
	}
}

// commitErr wraps a failed commit; no space on the file's device (ENOSPC,
// EDQUOT) is store.ErrFull, which goes away once space is freed.
func commitErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("store: bolt: commit: %w: %w", store.ErrFull, err)
	}
	return fmt.Errorf("store: bolt: commit: %w", err)
}

// ReleaseMemory drops the pages of the mapped file from this process's
// resident set (madvise MADV_DONTNEED on bbolt's read-only shared mapping):
// they stay in the page cache and fault back in when read again. Long scans
// (audit exports) call it, on the transaction they read in, so that their
// memory stays constant.
func (d *DB) ReleaseMemory() {
	_ = d.db.View(func(btx *bbolt.Tx) error { releaseMapped(btx); return nil })
}

// ReleaseMemory is DB.ReleaseMemory from inside a transaction.
func (t *tx) ReleaseMemory() { releaseMapped(t.btx) }

// releaseMapped drops the resident pages of btx's database mapping, up to
// the size of its data (mappedSpan).
func releaseMapped(btx *bbolt.Tx) {
	addr, n := mappedSpan(btx)
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, addr, n, syscall.MADV_DONTNEED)
}

// mappedSpan is the start of btx's database mapping and the length of its
// data: btx.Size(), which an open transaction keeps inside the mapping. Not
// the file's size: bbolt grows the file ahead of its mapping, and madvise
// past the mapping would drop whatever memory the kernel placed after it.
func mappedSpan(btx *bbolt.Tx) (addr, n uintptr) {
	page := uintptr(os.Getpagesize())
	return btx.DB().Info().Data, uintptr(btx.Size()) &^ (page - 1)
}

// View implements store.Store.
func (d *DB) View(ctx context.Context, fn func(store.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.db.View(func(btx *bbolt.Tx) error {
		return fn(&tx{btx: btx, buckets: map[string]*handle{}})
	})
}

// Close stops the committer and closes the file. Pending calls get ErrClosed.
func (d *DB) Close() error {
	if !d.gc.Close() {
		return nil
	}
	return d.db.Close()
}

type tx struct {
	btx      *bbolt.Tx
	writable bool
	topics   store.Topics
	// buckets caches the bucket handles (a write transaction's shared by
	// the calls of a commit: a sweep's expiry writes 13 keys).
	buckets map[string]*handle
	// counters holds the values the calls of a commit put in
	// store.BucketSeq (nil: a View's), which its Get, Equal and Scan see,
	// written once all ran (flushCounters): each audit record and outbox
	// effect counts, and a sweep's expiry read and wrote two counters, 4
	// of its 18 keys. A call that fails rolls them back with the rest.
	counters map[string][]byte
	// kbuf holds the key of the bbolt call in progress (bbolt copies the
	// keys it keeps): a key's conversion to bytes is not an allocation
	// each time (7 of a sweep's 114 allocations an expiry).
	kbuf []byte
}

// key is k as bytes, valid until t's next call.
func (t *tx) key(k string) []byte {
	t.kbuf = append(t.kbuf[:0], k...)
	return t.kbuf
}

// holds tells whether bucket's key is one t holds until the commit (or
// would: a key bbolt refuses is put at once, failing its call alone).
func (t *tx) holds(bucket, key string) bool {
	return t.counters != nil && bucket == store.BucketSeq && key != "" && len(key) <= bbolt.MaxKeySize
}

// flushCounters writes the counters t holds.
func (t *tx) flushCounters() error {
	for k, v := range t.counters {
		if err := t.put(store.BucketSeq, k, v); err != nil {
			return err
		}
	}
	clear(t.counters)
	return nil
}

// handle is a bucket's handle in a transaction and a cursor on it, which
// every Get and Delete repositions (a Seek starts from the bucket's root,
// so writes in between do not matter): bbolt's own Get and Delete each
// allocate a cursor and grow its stack, a sixth of what a sweep allocates.
type handle struct {
	b *bbolt.Bucket
	c *bbolt.Cursor
}

// seek positions h's cursor at key and tells whether key is there, with
// its value (nil for a nested bucket, as bbolt's Get returns).
func (h *handle) seek(key []byte) ([]byte, bool) {
	if h.c == nil {
		h.c = h.b.Cursor()
	}
	k, v := h.c.Seek(key)
	return v, k != nil && bytes.Equal(k, key)
}

// fill is how full bbolt packs the pages of the buckets whose keys nearly
// only grow, instead of its half (bbolt.DefaultFillPercent suits keys
// inserted anywhere: a full page that takes a key in its middle splits):
// the outbox's sequence numbers and the audit log's time-ordered keys; the
// requests and approvals, keyed by their IDs, whose daily counters grow
// (requests after their owner's name: a few groups, each growing at its
// end; a permission or a question goes right after its request's
// approval); and the indexes ordered by those IDs or by times that grow
// with them, within a few groups too (the expiry timers by kind, the
// states' index by state, the open approvals, the inbox by room).
//
// A record rewritten in place that grows in a full page splits it. The
// requests' pages keep a quarter free: a request grows by about a third
// when it ends (its reason, its end time), so that a page of pending
// requests, once they all ended, still fits one page instead of
// splitting in two (10 and 3 of 13 in BenchmarkSweep). An approval grows
// by more than half (its decision, its cards' copies): no free room
// would spare it the split, so its pages are filled.
//
// A sweep writes 0.56 pages an expiry among 100,000 pending and 0.57
// among 1,000,000 (0.62 and 0.80 with the requests' pages filled too,
// and a settled approval keeping its notice time; 0.81 among 100,000
// with only the outbox and the audit log filled, 40 % more with none:
// BenchmarkSweep, docs/perf.md). A file of 100,000 pending approvals
// takes 161 MiB instead of 271. audit_by_request keeps bbolt's half: its
// keys group by request, of which there are many.
var fill = map[string]float64{
	"outbox": 1, "audit": 1,
	"requests": 0.75, "approvals": 1,
	"timers": 1, "requests_by_state": 1, "approvals_open": 1, "approvals_inbox": 1,
}

// FillPercent is how full the store packs bucket's pages (bbolt's
// Bucket.FillPercent, fill): a tool that writes the store's file through
// bbolt itself (the sweep's raw ceiling, BenchmarkSweepCeiling) packs them
// alike.
func FillPercent(bucket string) float64 {
	if f := fill[bucket]; f != 0 {
		return f
	}
	return bbolt.DefaultFillPercent
}

// bucket returns bucket's handle, nil if it does not exist.
func (t *tx) bucket(bucket string) *handle {
	if h := t.buckets[bucket]; h != nil {
		return h
	}
	b := t.btx.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	h := &handle{b: b}
	t.buckets[bucket] = h
	return h
}

func (t *tx) Get(bucket, key string) ([]byte, error) {
	v, err := t.value(bucket, key)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), v...), nil
}

// Equal tells whether the value of key in bucket is want (ErrNotFound:
// there is none), comparing it in place (store.Unchanged).
func (t *tx) Equal(bucket, key string, want []byte) (bool, error) {
	v, err := t.value(bucket, key)
	return err == nil && bytes.Equal(v, want), err
}

// value is the value of key in bucket, valid until tx changes it or ends.
func (t *tx) value(bucket, key string) ([]byte, error) {
	if t.holds(bucket, key) {
		if v, ok := t.counters[key]; ok {
			return v, nil
		}
	}
	h := t.bucket(bucket)
	if h == nil {
		return nil, store.ErrNotFound
	}
	v, ok := h.seek(t.key(key))
	if !ok || v == nil {
		return nil, store.ErrNotFound
	}
	return v, nil
}

func (t *tx) Put(bucket, key string, value []byte) error {
	if t.holds(bucket, key) {
		t.counters[key] = append([]byte{}, value...)
		return nil
	}
	return t.put(bucket, key, value)
}

// put writes key in bucket (created when needed) through bbolt.
func (t *tx) put(bucket, key string, value []byte) error {
	h := t.bucket(bucket)
	if h == nil {
		b, err := t.btx.CreateBucket([]byte(bucket))
		if err != nil {
			return fmt.Errorf("store: bolt: bucket %s: %w", bucket, err)
		}
		h = &handle{b: b}
		t.buckets[bucket] = h
	}
	b := h.b
	b.FillPercent = FillPercent(bucket)
	if value == nil {
		value = []byte{}
	}
	if err := b.Put(t.key(key), value); err != nil {
		return fmt.Errorf("store: bolt: put %s/%s: %w", bucket, key, err)
	}
	return nil
}

func (t *tx) Delete(bucket, key string) error {
	if t.holds(bucket, key) {
		delete(t.counters, key)
	}
	h := t.bucket(bucket)
	if h == nil {
		return nil
	}
	if _, ok := h.seek(t.key(key)); !ok {
		return nil
	}
	if err := h.c.Delete(); err != nil {
		return fmt.Errorf("store: bolt: delete %s/%s: %w", bucket, key, err)
	}
	return nil
}

func (t *tx) Scan(bucket, from, to string, fn func(string, []byte) error) error {
	if bucket == store.BucketSeq {
		if err := t.flushCounters(); err != nil {
			return err
		}
	}
	h := t.bucket(bucket)
	if h == nil {
		return nil
	}
	c := h.b.Cursor() // its own: fn may Get, Put or Delete in the bucket
	for k, v := c.Seek([]byte(from)); k != nil; k, v = c.Next() {
		if to != "" && string(k) >= to {
			return nil
		}
		if err := fn(string(k), v); err != nil {
			if errors.Is(err, store.ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (t *tx) Notify(topic string) {
	if t.writable {
		t.topics.Add(topic)
	}
}

// dumpRelease is how many bytes of keys and values Dump reads between two
// releases of the pages it mapped.
const dumpRelease = 16 << 20

// Dump implements store.Dumper: every bucket and key, in one read
// transaction.
func (d *DB) Dump(ctx context.Context, fn func(bucket, key string, value []byte) error) error {
	err := d.db.View(func(btx *bbolt.Tx) error {
		n := 0
		return btx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			bucket := string(name)
			return b.ForEach(func(k, v []byte) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				if n += len(k) + len(v); n >= dumpRelease {
					// The pages read stay resident otherwise: a dump
					// of the whole file would hold all of it.
					releaseMapped(btx)
					n = 0
				}
				return fn(bucket, string(k), v)
			})
		})
	})
	if errors.Is(err, store.ErrStop) {
		return nil
	}
	return err
}

// Restore restores the backup r holds (store.Backup) into the bolt file at
// path, which must not exist or hold an empty store. A file a running
// bridge holds is refused (Open's lock).
func Restore(ctx context.Context, path string, r io.ReadSeeker, o store.RestoreOptions) (store.BackupInfo, error) {
	db, err := Open(path)
	if err != nil {
		return store.BackupInfo{}, fmt.Errorf("store: restore: %w", err)
	}
	info, err := store.Restore(ctx, db, r, o)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("store: restore: %w", cerr)
	}
	return info, err
}
