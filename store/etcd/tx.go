package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// write is one buffered put or delete.
type write struct {
	value []byte
	del   bool
}

// span is a scanned key range [start, end).
type span struct{ start, end string }

// group is the state shared by the calls committed in one etcd Txn (or one
// View): the revision they all read, and the writes and reads of the calls
// merged so far.
type group struct {
	s   *Store
	ctx context.Context
	rev int64 // read revision; 0 until the first read fixes it

	writes map[string]write // full key → last write
	reads  map[string]int64 // full key → ModRevision seen (0: missing)
	spans  []span
	cache  map[string]cached // values read at rev, shared by the group's calls
	older  map[string]cached // the warm cache's older generation (Store.warm)
	warm   bool              // started from the warm cache: rev may be behind etcd

	guess   bool            // reads of Options.Absent may be guessed missing
	guessed map[string]bool // keys taken as missing without a read
}

// cached is a value read from etcd at the group's revision.
type cached struct {
	value  []byte // nil: missing
	modRev int64
	// guessed: taken as missing without a read (Options.Absent); every
	// Update that uses it compares it, whatever the ops limit.
	guessed bool
}

// behind reports whether what g read may be behind etcd: it read at the
// warm cache's revision, not at one etcd gave it. Its reads are compared
// at commit even if it writes nothing, so that an Update never answers
// from a stale view.
func (g *group) behind() bool { return g.warm && len(g.reads)+len(g.spans) > 0 }

// cached looks key up in the group's cache, then in the warm cache's older
// generation, moving what it finds there to the newer.
func (g *group) cached(key string) (cached, bool) {
	c, ok := g.cache[key]
	if ok || g.older == nil {
		return c, ok
	}
	if c, ok = g.older[key]; ok {
		delete(g.older, key)
		g.cache[key] = c
	}
	return c, ok
}

// fits reports whether t's writes can join the group's Txn.
func (g *group) fits(t *tx, fenced bool) bool {
	limit := g.s.opt.MaxTxnOps
	if fenced {
		limit-- // the else branch reads the election key
	}
	n, size := len(g.writes), g.bytes()
	for k, w := range t.writes {
		if was, ok := g.writes[k]; ok {
			size += len(w.value) - len(was.value) // t's value replaces the group's
		} else {
			n++
			size += len(k) + len(w.value)
		}
	}
	return n <= limit && size <= g.s.opt.MaxTxnBytes
}

func (g *group) bytes() int {
	n := 0
	for k, w := range g.writes {
		n += len(k) + len(w.value)
	}
	return n
}

// merge adds t's writes and reads to the group.
func (g *group) merge(t *tx) {
	maps.Copy(g.writes, t.writes)
	for k, rev := range t.reads {
		g.reads[k] = rev
	}
	g.spans = append(g.spans, t.spans...)
	for k := range t.guessed {
		if g.guessed == nil {
			g.guessed = map[string]bool{}
		}
		g.guessed[k] = true
	}
}

// compares returns at most limit compares that fail if anything the group
// read from etcd changed after the read revision. The keys guessed missing
// come first: they must all be compared (txn makes sure they fit).
func (g *group) compares(limit int) []clientv3.Cmp {
	var out []clientv3.Cmp
	for _, k := range slices.Sorted(maps.Keys(g.guessed)) {
		out = append(out, clientv3.Compare(clientv3.ModRevision(k), "=", 0))
	}
	for _, sp := range g.spans {
		if len(out) >= limit {
			return out
		}
		out = append(out, clientv3.Compare(clientv3.ModRevision(sp.start), "<", g.rev+1).WithRange(sp.end))
	}
	for _, k := range slices.Sorted(maps.Keys(g.reads)) {
		if g.guessed[k] {
			continue
		}
		if len(out) >= limit {
			return out
		}
		out = append(out, clientv3.Compare(clientv3.ModRevision(k), "=", g.reads[k]))
	}
	return out
}

// readOpts pins reads to the group's revision once it is known.
func (g *group) readOpts(opts ...clientv3.OpOption) []clientv3.OpOption {
	if g.rev != 0 {
		opts = append(opts, clientv3.WithRev(g.rev))
	}
	return opts
}

func (g *group) get(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(g.ctx, g.s.opt.Timeout)
	defer cancel()
	resp, err := g.s.cli.Get(ctx, key, g.readOpts(opts...)...)
	if err != nil {
		return nil, wrap("read", err)
	}
	if g.rev == 0 {
		g.rev = resp.Header.Revision
	}
	return resp, nil
}

// tx is one call's view: its own buffered writes over the group's over etcd
// at the group's revision.
type tx struct {
	g        *group
	writable bool
	writes   map[string]write
	reads    map[string]int64
	spans    []span
	guessed  map[string]bool
	topics   store.Topics
}

func (t *tx) bytes() int {
	n := 0
	for k, w := range t.writes {
		n += len(k) + len(w.value)
	}
	return n
}

// bucketPrefix returns <prefix>/<bucket>/.
func (t *tx) bucketPrefix(bucket string) (string, error) {
	if bucket == "" || strings.Contains(bucket, "/") {
		return "", fmt.Errorf("store: etcd: bucket %q: want a non-empty name without '/'", bucket)
	}
	return t.g.s.prefix + "/" + bucket + "/", nil
}

// buffered returns the newest buffered write of key: this call's, then the
// group's.
func (t *tx) buffered(key string) (write, bool) {
	if w, ok := t.writes[key]; ok {
		return w, true
	}
	w, ok := t.g.writes[key]
	return w, ok
}

func (t *tx) Get(bucket, key string) ([]byte, error) {
	bp, err := t.bucketPrefix(bucket)
	if err != nil {
		return nil, err
	}
	full := bp + key
	if w, ok := t.buffered(full); ok {
		if w.del {
			return nil, store.ErrNotFound
		}
		return append([]byte{}, w.value...), nil
	}
	c, ok := t.g.cached(full)
	switch {
	case ok && !c.guessed:
	case ok || (t.writable && t.g.guess && t.g.s.absent[bucket] && !t.g.s.present.has(full)):
		// Taken as missing, compared at commit.
		if t.guessed == nil {
			t.guessed = map[string]bool{}
		}
		t.guessed[full] = true
		c = cached{guessed: true}
		t.g.cache[full] = c
	default:
		resp, err := t.g.get(full)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) > 0 {
			c = cached{value: resp.Kvs[0].Value, modRev: resp.Kvs[0].ModRevision}
			if c.value == nil {
				c.value = []byte{}
			}
		}
		if t.g.cache != nil {
			t.g.cache[full] = c
		}
	}
	if t.writable {
		t.reads[full] = c.modRev
	}
	if c.value == nil {
		return nil, store.ErrNotFound
	}
	return append([]byte{}, c.value...), nil
}

func (t *tx) Put(bucket, key string, value []byte) error {
	if !t.writable {
		return errors.New("store: etcd: put in a read-only transaction")
	}
	bp, err := t.bucketPrefix(bucket)
	if err != nil {
		return err
	}
	t.writes[bp+key] = write{value: append([]byte{}, value...)}
	return nil
}

func (t *tx) Delete(bucket, key string) error {
	if !t.writable {
		return errors.New("store: etcd: delete in a read-only transaction")
	}
	bp, err := t.bucketPrefix(bucket)
	if err != nil {
		return err
	}
	t.writes[bp+key] = write{del: true}
	return nil
}

// Scan merges a paged range read of etcd with the buffered writes in range.
func (t *tx) Scan(bucket, from, to string, fn func(string, []byte) error) error {
	bp, err := t.bucketPrefix(bucket)
	if err != nil {
		return err
	}
	start, end := bp+from, bp+to
	if to == "" {
		end = clientv3.GetPrefixRangeEnd(bp)
	}
	if start >= end {
		return nil
	}
	// The buffered writes in range, in key order.
	var over []string
	for _, m := range []map[string]write{t.writes, t.g.writes} {
		for k := range m {
			if k >= start && k < end {
				over = append(over, k)
			}
		}
	}
	slices.Sort(over)
	over = slices.Compact(over)

	visited := "" // last key handed to fn
	emit := func(k string, v []byte) error {
		visited = k
		if v == nil {
			v = []byte{}
		}
		return fn(strings.TrimPrefix(k, bp), v)
	}
	// emitOver hands fn the buffered puts with keys below limit ("" : all).
	emitOver := func(limit string) error {
		for len(over) > 0 && (limit == "" || over[0] < limit) {
			k := over[0]
			over = over[1:]
			if w, _ := t.buffered(k); !w.del {
				if err := emit(k, w.value); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err = func() error {
		cur := start
		for {
			resp, err := t.g.get(cur, clientv3.WithRange(end), clientv3.WithLimit(scanPage))
			if err != nil {
				return err
			}
			for _, kv := range resp.Kvs {
				k := string(kv.Key)
				if err := emitOver(k); err != nil {
					return err
				}
				if len(over) > 0 && over[0] == k {
					continue // the buffered write of k wins (emitted next round, or deleted)
				}
				if err := emit(k, kv.Value); err != nil {
					return err
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return emitOver("")
			}
			cur = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}()
	if errors.Is(err, store.ErrStop) {
		err = nil
		end = visited + "\x00" // only what fn saw is part of the read set
	}
	if err == nil && t.writable && t.g.rev != 0 {
		t.spans = append(t.spans, span{start, end})
	}
	return err
}

func (t *tx) Notify(topic string) {
	if t.writable {
		t.topics.Add(topic)
	}
}
