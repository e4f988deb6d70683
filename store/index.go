package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/roombridge/roombridge/internal/jsonx"
)

// BucketSeq is the counters' bucket (NextSeq, Seq). Its keys are few and
// written by nearly every transaction (each audit record and outbox effect
// counts): a backend may hold them until its commit (bolt does).
const BucketSeq = "seq"

// Buckets used by the indexes of this package.
const (
	bucketTimers  = "timers"
	bucketOutbox  = "outbox"
	bucketCoalesc = "outbox_coalesce"
	bucketDedupe  = "dedupe"
)

// GetJSON reads key from bucket and decodes it into v.
func GetJSON(tx Tx, bucket, key string, v any) error {
	b, err := tx.Get(bucket, key)
	if err != nil {
		return err
	}
	if err := Decode(b, v); err != nil {
		return fmt.Errorf("store: decode %s/%s: %w", bucket, key, err)
	}
	return nil
}

// Unchanged tells whether the value of key in bucket is want (ErrNotFound:
// there is none), without copying it where the backend can compare in
// place (bolt): a write transaction that prepared its work from a read
// before it checks that nothing changed since.
func Unchanged(tx Tx, bucket, key string, want []byte) (bool, error) {
	if c, ok := tx.(interface {
		Equal(bucket, key string, want []byte) (bool, error)
	}); ok {
		return c.Equal(bucket, key, want)
	}
	b, err := tx.Get(bucket, key)
	if err != nil {
		return false, err
	}
	return bytes.Equal(b, want), nil
}

// PutJSON encodes v and writes it to key in bucket.
func PutJSON(tx Tx, bucket, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s/%s: %w", bucket, key, err)
	}
	return tx.Put(bucket, key, b)
}

// NextSeq increments the named counter and returns its new value (first: 1).
func NextSeq(tx Tx, name string) (uint64, error) {
	return nextSeqs(tx, name, 1)
}

// nextSeqs adds n to the named counter and returns the first of the n
// values it passed.
func nextSeqs(tx Tx, name string, n uint64) (uint64, error) {
	first, err := Seq(tx, name)
	if err != nil {
		return 0, err
	}
	first++
	n += first - 1
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	if err := tx.Put(BucketSeq, name, b[:]); err != nil {
		return 0, err
	}
	return first, nil
}

// Seq returns the named counter's current value (0 if never incremented).
func Seq(tx Tx, name string) (uint64, error) {
	b, err := tx.Get(BucketSeq, name)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("store: counter %s: corrupt value", name)
	}
	return binary.BigEndian.Uint64(b), nil
}

// Timer is one entry of the expiry index: id of kind is due at Due.
type Timer struct {
	Kind string
	Due  time.Time
	ID   string
}

// timerKey orders timers by kind, then due time (zero-padded unix ms), then id,
// so that everything due is one contiguous key range.
func timerKey(kind string, due time.Time, id string) string {
	var buf [96]byte // one allocation, the string's, for most keys
	b := jsonx.AppendPadded(append(append(buf[:0], kind...), '/'), due.UnixMilli(), 13)
	return string(append(append(b, '/'), id...))
}

// TimerKey is a timer's key in the expiry index (TimerKeyOf): built ahead
// of the transaction that adds or removes the timer, off the store's
// writer (the sweeper prepares an expiry's in its read phase).
type TimerKey string

// TimerKeyOf is the key of id's timer of kind, due at due.
func TimerKeyOf(kind string, due time.Time, id string) TimerKey {
	return TimerKey(timerKey(kind, due, id))
}

// Add puts k's timer into the expiry index.
func (k TimerKey) Add(tx Tx) error { return tx.Put(bucketTimers, string(k), nil) }

// Remove takes k's timer out of the expiry index.
func (k TimerKey) Remove(tx Tx) error { return tx.Delete(bucketTimers, string(k)) }

// AddTimer puts id into the expiry index of kind, due at due.
func AddTimer(tx Tx, kind string, due time.Time, id string) error {
	return TimerKeyOf(kind, due, id).Add(tx)
}

// RemoveTimer takes id out of the expiry index; due must be the time it was
// added with.
func RemoveTimer(tx Tx, kind string, due time.Time, id string) error {
	return TimerKeyOf(kind, due, id).Remove(tx)
}

// DueTimers returns up to limit timers of kind due at or before now, earliest
// first. It reads only the due key range, never the whole index.
func DueTimers(tx Tx, kind string, now time.Time, limit int) ([]Timer, error) {
	return DueTimersAfter(tx, kind, now, Timer{}, limit)
}

// DueTimersAfter is DueTimers from the timer that follows after on (the
// zero Timer: from the first): a sweep reads the due range a page at a
// time while it expires the pages before.
func DueTimersAfter(tx Tx, kind string, now time.Time, after Timer, limit int) ([]Timer, error) {
	from := kind + "/"
	if after.ID != "" {
		from = timerKey(kind, after.Due, after.ID) + "\x00" // the first key after it
	}
	to := timerKey(kind, now, "")
	to = to[:len(to)-1] + "0" // "kind/<ms>0" > "kind/<ms>/…": includes ms == now
	var out []Timer
	err := tx.Scan(bucketTimers, from, to, func(k string, _ []byte) error {
		t, err := parseTimerKey(kind, k)
		if err != nil {
			return err
		}
		out = append(out, t)
		if limit > 0 && len(out) >= limit {
			return ErrStop
		}
		return nil
	})
	return out, err
}

// Due reads DueTimersAfter in a read transaction of s.
func Due(ctx context.Context, s Store, kind string, now time.Time, after Timer, limit int) ([]Timer, error) {
	var due []Timer
	err := s.View(ctx, func(tx Tx) error {
		var err error
		due, err = DueTimersAfter(tx, kind, now, after, limit)
		return err
	})
	return due, err
}

// NextTimer returns the earliest timer of kind, and false if there is none.
func NextTimer(tx Tx, kind string) (Timer, bool, error) {
	var t Timer
	var found bool
	err := tx.Scan(bucketTimers, kind+"/", PrefixEnd(kind+"/"), func(k string, _ []byte) error {
		var err error
		t, err = parseTimerKey(kind, k)
		found = err == nil
		if err != nil {
			return err
		}
		return ErrStop
	})
	return t, found, err
}

func parseTimerKey(kind, k string) (Timer, error) {
	rest := k[len(kind)+1:]
	if len(rest) < 14 || rest[13] != '/' {
		return Timer{}, fmt.Errorf("store: corrupt timer key %q", k)
	}
	ms, err := strconv.ParseInt(rest[:13], 10, 64)
	if err != nil {
		return Timer{}, fmt.Errorf("store: corrupt timer key %q: %w", k, err)
	}
	return Timer{Kind: kind, Due: time.UnixMilli(ms).UTC(), ID: rest[14:]}, nil
}

// Effect is one entry of the outbox: something to do on a chat surface.
// The store keeps effects in insertion order; Payload belongs to the caller
// and must be valid JSON: Enqueue and UpdateEffect store it as it is.
type Effect struct {
	Seq uint64 `json:"seq"`
	// Queue groups effects that must be delivered in order (one thread).
	Queue string `json:"queue"`
	// Coalesce, when set, makes a newer effect with the same key replace an
	// undelivered older one (status edits: only the newest is sent).
	Coalesce  string          `json:"coalesce,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Attempts  int             `json:"attempts,omitempty"`
	NotBefore time.Time       `json:"not_before,omitzero"`
	LastError string          `json:"last_error,omitempty"`
	Created   time.Time       `json:"created"`
	// Span, above 1, makes the effect stand for up to Span effects that
	// ExpandEffect puts in its place: Enqueue reserves the Span sequence
	// numbers from Seq on, so that they keep its place in its queue.
	Span int `json:"span,omitempty"`
}

// TopicOutbox is notified whenever an effect is enqueued.
const TopicOutbox = "outbox"

func outboxKey(seq uint64) string {
	return string(jsonx.AppendPaddedUint(make([]byte, 0, 20), seq, 20))
}

// Enqueue appends e to the outbox (assigning e.Seq, and reserving the
// sequence numbers of its Span) and notifies TopicOutbox. If e.Coalesce
// names an undelivered effect, that one is dropped: the newest effect of a
// coalesce key is the only one delivered.
func Enqueue(tx Tx, e *Effect) error {
	if err := checkSpan(e.Span); err != nil {
		return err
	}
	seq, err := enqueueTx(tx, e.Coalesce, e.Span, func(seq uint64) ([]byte, error) {
		c := *e
		c.Seq = seq
		b, err := encodeEffect(&c)
		if err != nil {
			return nil, fmt.Errorf("store: outbox: %w", err)
		}
		return b, nil
	})
	if err == nil {
		e.Seq = seq
	}
	return err
}

// checkSpan refuses a negative span (Enqueue, PrepareEffect).
func checkSpan(span int) error {
	if span < 0 {
		return fmt.Errorf("store: enqueue: a span of %d (0 or more)", span)
	}
	return nil
}

// PreparedEffect is an effect encoded ahead of the transaction that
// enqueues it (PrepareEffect), all but its sequence number, which
// EnqueueTx assigns: the sweeper prepares an expiry's effect off the
// store's single writer.
type PreparedEffect struct {
	coalesce string
	span     int
	rec      jsonx.SeqRecord
}

// PrepareEffect encodes e (its Seq aside) for EnqueueTx.
func PrepareEffect(e Effect) (PreparedEffect, error) {
	if err := checkSpan(e.Span); err != nil {
		return PreparedEffect{}, err
	}
	e.Seq = 0
	b, err := encodeEffect(&e)
	if err != nil {
		return PreparedEffect{}, fmt.Errorf("store: outbox: %w", err)
	}
	return PreparedEffect{coalesce: e.Coalesce, span: e.Span, rec: jsonx.PrepareSeq(b)}, nil
}

// EnqueueTx appends the prepared effect to the outbox, as Enqueue does.
func (p PreparedEffect) EnqueueTx(tx Tx) error {
	if p.rec == nil {
		return errors.New("store: enqueue: an effect not prepared (PrepareEffect)")
	}
	_, err := p.enqueueTx(tx)
	return err
}

func (p PreparedEffect) enqueueTx(tx Tx) (uint64, error) {
	return enqueueTx(tx, p.coalesce, p.span, func(seq uint64) ([]byte, error) { return p.rec.With(seq), nil })
}

// enqueueTx appends the effect that record encodes with its sequence
// number to the outbox, reserving span numbers, dropping the undelivered
// effect of coalesceKey (Enqueue, EnqueueTx).
func enqueueTx(tx Tx, coalesceKey string, span int, record func(seq uint64) ([]byte, error)) (uint64, error) {
	seq, err := nextSeqs(tx, "outbox", uint64(max(span, 1)))
	if err != nil {
		return 0, err
	}
	if _, err := coalesce(tx, coalesceKey, seq); err != nil {
		return 0, err
	}
	b, err := record(seq)
	if err != nil {
		return 0, err
	}
	if err := tx.Put(bucketOutbox, outboxKey(seq), b); err != nil {
		return 0, err
	}
	tx.Notify(TopicOutbox)
	return seq, nil
}

// coalesce makes the effect about to be written under seq the effect of
// its coalesce key, dropping the undelivered one key names; unless that
// one comes after it (ExpandEffect: enqueued after the expanded effect's
// span), which replaces it instead: kept false, and nothing is written.
func coalesce(tx Tx, key string, seq uint64) (kept bool, err error) {
	if key == "" {
		return true, nil
	}
	old, err := tx.Get(bucketCoalesc, key)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return false, err
	case string(old) > outboxKey(seq): // keys of one width: their order is the numbers'
		return false, nil
	default:
		if err := tx.Delete(bucketOutbox, string(old)); err != nil {
			return false, err
		}
	}
	return true, tx.Put(bucketCoalesc, key, []byte(outboxKey(seq)))
}

// ExpandEffect puts parts, in order, in the place of the undelivered effect
// e, which stands for them (its stored Span bounds how many): parts[i] is
// stored under e.Seq+i, in e's queue, created when e was (as stored). A part's coalesce key
// works as Enqueue's, as if the part had been enqueued in e's place: it
// drops an older effect of its key, and an effect of its key enqueued
// since replaces the part. An e no longer in the outbox (delivered, or
// expanded already) is ErrExpanded.
func ExpandEffect(tx Tx, e Effect, parts []Effect) error {
	cur, err := GetEffect(tx, e.Seq) // its span, queue and time as stored, not as the caller says
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("store: expand effect %d: %w", e.Seq, ErrExpanded)
	case err != nil:
		return err
	case cur.Span == 0: // expanded already: its first part is there
		return fmt.Errorf("store: expand effect %d: %w", e.Seq, ErrExpanded)
	case len(parts) > cur.Span:
		return fmt.Errorf("store: expand effect %d: %d effects for a span of %d", e.Seq, len(parts), cur.Span)
	}
	if err := tx.Delete(bucketOutbox, outboxKey(e.Seq)); err != nil {
		return err
	}
	for i := range parts {
		p := parts[i]
		p.Seq, p.Queue, p.Created, p.Span = cur.Seq+uint64(i), cur.Queue, cur.Created, 0
		kept, err := coalesce(tx, p.Coalesce, p.Seq)
		if err != nil {
			return err
		}
		if !kept {
			continue
		}
		if err := putEffect(tx, &p); err != nil {
			return err
		}
	}
	tx.Notify(TopicOutbox)
	return nil
}

// putEffect writes e under its Seq.
func putEffect(tx Tx, e *Effect) error {
	b, err := encodeEffect(e)
	if err != nil {
		return fmt.Errorf("store: outbox: %w", err)
	}
	return tx.Put(bucketOutbox, outboxKey(e.Seq), b)
}

// encodeEffect is e's JSON (what json.Marshal gives, field for field), by
// hand: json.Marshal would validate and compact the payload (a rendered
// message, most of an effect) and each time's MarshalJSON output again,
// byte by byte, inside the store's single writer (a fifth of a sweep's
// expiry in BenchmarkSweep went there). The payload is written as it is.
func encodeEffect(e *Effect) ([]byte, error) {
	o := jsonx.NewObject(160 + len(e.Queue) + len(e.Coalesce) + len(e.Payload) + len(e.LastError))
	o.Uint("seq", e.Seq, false)
	o.String("queue", e.Queue, false)
	o.String("coalesce", e.Coalesce, true)
	o.Raw("payload", e.Payload)
	o.Int("attempts", int64(e.Attempts), true)
	o.Time("not_before", e.NotBefore, true)
	o.String("last_error", e.LastError, true)
	o.Time("created", e.Created, false)
	o.Int("span", int64(e.Span), true)
	return o.Bytes()
}

// PendingEffects returns up to limit undelivered effects in insertion order
// (0: all). A reader that reads the outbox again and again keeps an
// EffectCache instead.
func PendingEffects(tx Tx, limit int) ([]Effect, error) {
	var out []Effect
	err := tx.Scan(bucketOutbox, "", "", func(_ string, v []byte) error {
		e, err := decodeEffect(bytes.Clone(v))
		if err != nil {
			return err
		}
		out = append(out, e)
		if limit > 0 && len(out) >= limit {
			return ErrStop
		}
		return nil
	})
	return out, err
}

// decodeEffect decodes a stored effect (its payload shares raw).
func decodeEffect(raw []byte) (Effect, error) {
	var e Effect
	if err := json.Unmarshal(raw, &e); err != nil {
		return Effect{}, fmt.Errorf("store: decode effect: %w", err)
	}
	return e, nil
}

// GetEffect returns the undelivered effect seq, or ErrNotFound.
func GetEffect(tx Tx, seq uint64) (Effect, error) {
	var e Effect
	err := GetJSON(tx, bucketOutbox, outboxKey(seq), &e)
	return e, err
}

// UpdateEffect rewrites an undelivered effect (attempts, back-off).
func UpdateEffect(tx Tx, e Effect) error {
	if _, err := tx.Get(bucketOutbox, outboxKey(e.Seq)); err != nil {
		return err
	}
	return putEffect(tx, &e)
}

// AckEffect removes a delivered effect from the outbox.
func AckEffect(tx Tx, e Effect) error {
	if e.Coalesce != "" {
		cur, err := tx.Get(bucketCoalesc, e.Coalesce)
		if err == nil && string(cur) == outboxKey(e.Seq) {
			if err := tx.Delete(bucketCoalesc, e.Coalesce); err != nil {
				return err
			}
		}
	}
	return tx.Delete(bucketOutbox, outboxKey(e.Seq))
}

// timerDedupe is the expiry index's kind of dedupe keys in format 1: each
// Remember also wrote a timer. From format 2 a dedupe key's value alone
// carries its expiry, and PurgeDedupe scans the keys themselves
// (DropDedupeTimers clears the old timers).
const timerDedupe = "dedupe"

// BucketDedupe is the bucket of Dedupe's and Remember's keys (inbound event
// IDs), which are nearly always read before they exist: a backend may take
// them as missing without asking and check that at commit (store/etcd).
const BucketDedupe = bucketDedupe

// Dedupe records key as seen until now+ttl. It returns true the first time a
// live key is seen and false for every repeat before it expires.
func Dedupe(tx Tx, key string, now time.Time, ttl time.Duration) (bool, error) {
	_, live, err := Recall(tx, key, now)
	if err != nil || live {
		return false, err
	}
	return true, Remember(tx, key, nil, now, ttl)
}

// Recall returns the value Remember kept with key, and whether key is live
// (remembered, and not expired by now).
func Recall(tx Tx, key string, now time.Time) ([]byte, bool, error) {
	b, err := tx.Get(bucketDedupe, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case dedupeLive(b, now):
		return b[8:], true, nil
	}
	return nil, false, nil
}

// dedupeLive tells whether a dedupe key's value (its expiry, 8 bytes of
// Unix ms, then the remembered value) is live at now.
func dedupeLive(b []byte, now time.Time) bool {
	return len(b) >= 8 && now.UnixMilli() < int64(binary.BigEndian.Uint64(b))
}

// Remember records key, with value, as seen until now+ttl (a dedupe key:
// PurgeDedupe deletes it once expired). One write: the value carries the
// expiry.
func Remember(tx Tx, key string, value []byte, now time.Time, ttl time.Duration) error {
	v := make([]byte, 8, 8+len(value))
	binary.BigEndian.PutUint64(v, uint64(now.Add(ttl).UnixMilli()))
	return tx.Put(bucketDedupe, key, append(v, value...))
}

// PurgeDedupe deletes dedupe keys expired by now, reading the keys after
// after in order: it stops once it deleted limit keys or read
// purgeReadFactor times limit (0: no limit), and returns how many it deleted
// and the last key it read ("" once it read to the end). A purge of the whole
// bucket calls it again from that key, a transaction each.
func PurgeDedupe(tx Tx, now time.Time, after string, limit int) (deleted int, next string, err error) {
	from := ""
	if after != "" {
		from = after + "\x00"
	}
	read, last, done := 0, "", true
	var expired []string
	err = tx.Scan(bucketDedupe, from, "", func(k string, v []byte) error {
		if limit > 0 && (len(expired) >= limit || read >= purgeReadFactor*limit) {
			done = false
			return ErrStop
		}
		read, last = read+1, k
		if !dedupeLive(v, now) {
			expired = append(expired, k)
		}
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	for _, k := range expired {
		if err := tx.Delete(bucketDedupe, k); err != nil {
			return 0, "", err
		}
	}
	if done {
		last = ""
	}
	return len(expired), last, nil
}

// purgeReadFactor bounds the keys one PurgeDedupe reads, as a multiple of
// the keys it may delete.
const purgeReadFactor = 20

// DropDedupeTimers deletes up to limit of format 1's dedupe timers (0: all)
// and returns how many it deleted; dry, it deletes nothing and counts them.
func DropDedupeTimers(tx Tx, limit int, dry bool) (int, error) {
	var keys []string
	n := 0
	err := tx.Scan(bucketTimers, timerDedupe+"/", PrefixEnd(timerDedupe+"/"), func(k string, _ []byte) error {
		if n++; !dry { // a dry run counts: it keeps no key
			keys = append(keys, k)
		}
		if limit > 0 && n >= limit {
			return ErrStop
		}
		return nil
	})
	if err != nil || dry {
		return n, err
	}
	for _, k := range keys {
		if err := tx.Delete(bucketTimers, k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}
