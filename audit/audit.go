// Package audit keeps the audit log: one record per transition, decision and
// delivery failure, written in the same store transaction as the change, and
// queried or exported (JSONL, CSV) in constant memory.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/internal/jsonx"
	"github.com/roombridge/roombridge/store"
)

const (
	bucketLog   = "audit"
	bucketByReq = "audit_by_request"
)

// Record is one audit entry.
type Record struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id,omitempty"`
	Actor     string    `json:"actor"`
	Surface   string    `json:"surface,omitempty"`
	Action    string    `json:"action"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// key orders records by time (Unix ms), then by sequence (unique, so two
// records in one millisecond never collide).
func key(ms int64, seq uint64) string {
	b := make([]byte, 0, 26)
	b = jsonx.AppendPadded(b, ms, 13)
	return string(jsonx.AppendPaddedUint(append(b, '-'), seq, 12))
}

// Append writes r inside tx, assigning its sequence number. Call it in the same
// transaction as the change it records.
func Append(tx store.Tx, r Record) error {
	r.Time = r.Time.UTC()
	return appendTx(tx, r.Time.UnixMilli(), r.RequestID, func(seq uint64) ([]byte, error) {
		r.Seq = seq
		b, err := encodeRecord(&r)
		if err != nil {
			return nil, fmt.Errorf("audit: append: %w", err)
		}
		return b, nil
	})
}

// Prepared is a record encoded ahead of the transaction that appends it
// (Prepare), all but its sequence number, which AppendTx assigns.
type Prepared struct {
	ms        int64 // the record's time, Unix ms (its key)
	requestID string
	rec       jsonx.SeqRecord
}

// Prepare encodes r (its Seq aside) for AppendTx: the sweeper prepares its
// expiries' records off the store's single writer.
func Prepare(r Record) (Prepared, error) {
	r.Seq, r.Time = 0, r.Time.UTC()
	b, err := encodeRecord(&r)
	if err != nil {
		return Prepared{}, fmt.Errorf("audit: append: %w", err)
	}
	return Prepared{ms: r.Time.UnixMilli(), requestID: r.RequestID, rec: jsonx.PrepareSeq(b)}, nil
}

// AppendTx writes the prepared record inside tx, assigning its sequence
// number, as Append does.
func (p Prepared) AppendTx(tx store.Tx) error {
	if p.rec == nil {
		return errors.New("audit: append: a record not prepared (Prepare)")
	}
	return appendTx(tx, p.ms, p.requestID, func(seq uint64) ([]byte, error) { return p.rec.With(seq), nil })
}

// appendTx writes the record that record encodes with its sequence number,
// at ms, of request requestID ("": none) (Append, AppendTx).
func appendTx(tx store.Tx, ms int64, requestID string, record func(seq uint64) ([]byte, error)) error {
	seq, err := store.NextSeq(tx, "audit")
	if err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	b, err := record(seq)
	if err != nil {
		return err
	}
	k := key(ms, seq)
	if err := tx.Put(bucketLog, k, b); err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	if requestID != "" {
		if err := tx.Put(bucketByReq, requestID+"/"+k, nil); err != nil {
			return fmt.Errorf("audit: append: %w", err)
		}
	}
	return nil
}

// encodeRecord is r's JSON, by hand, byte for byte what json.Marshal gives
// (TestEncodeRecordIsJSONMarshal): every transition writes one, inside
// the store's single writer.
func encodeRecord(r *Record) ([]byte, error) {
	// Names, punctuation, the number and the time: ~150 bytes; one
	// allocation, no growth (an expiry's record is 212 bytes).
	o := jsonx.NewObject(160 + len(r.RequestID) + len(r.Actor) + len(r.Surface) + len(r.Action) +
		len(r.From) + len(r.To) + len(r.Detail))
	o.Uint("seq", r.Seq, false)
	o.Time("time", r.Time, false)
	o.String("request_id", r.RequestID, true)
	o.String("actor", r.Actor, false)
	o.String("surface", r.Surface, true)
	o.String("action", r.Action, false)
	o.String("from", r.From, true)
	o.String("to", r.To, true)
	o.String("detail", r.Detail, true)
	return o.Bytes()
}

// Query selects records. Zero Since/Until mean unbounded; Until is exclusive.
type Query struct {
	Since, Until time.Time
	RequestID    string
}

// bound is the first key of the millisecond of t ("" for the zero time).
func bound(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmt.Sprintf("%013d-", t.UnixMilli())
}

// upper is the exclusive key bound for Until: past every record of the
// millisecond that holds until, so that records in that millisecond but
// before until are kept (each filters the exact times).
func upper(until time.Time) string {
	if until.IsZero() {
		return ""
	}
	ms := until.UnixMilli()
	if time.UnixMilli(ms).Before(until) {
		ms++
	}
	return fmt.Sprintf("%013d-", ms)
}

// Each calls fn for every record matching q in time order, reading from one
// consistent snapshot in constant memory. fn returning store.ErrStop ends the
// walk early without error.
func Each(ctx context.Context, s store.Store, q Query, fn func(*Record) error) error {
	return s.View(ctx, func(tx store.Tx) error {
		return each(ctx, tx, q, fn)
	})
}

func each(ctx context.Context, tx store.Tx, q Query, fn func(*Record) error) error {
	var r Record
	return eachRaw(ctx, tx, q, func(v []byte) error {
		r = Record{}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("audit: decode: %w", err)
		}
		if !q.holds(r.Time) {
			return nil
		}
		return fn(&r)
	})
}

// holds reports whether t is within q's times (keys have millisecond
// resolution, times do not).
func (q Query) holds(t time.Time) bool {
	return !t.Before(q.Since) && (q.Until.IsZero() || t.Before(q.Until))
}

// bounded reports whether q has a time bound.
func (q Query) bounded() bool { return !q.Since.IsZero() || !q.Until.IsZero() }

// eachRaw calls visit with the stored bytes of every record whose key
// matches q (valid only during the call), in time order: the caller filters
// the exact times (Query.holds).
func eachRaw(ctx context.Context, tx store.Tx, q Query, visit func(v []byte) error) error {
	n := 0
	checkCtx := func() error {
		n++
		if n%4096 == 0 {
			return ctx.Err()
		}
		return nil
	}
	if q.RequestID == "" {
		return tx.Scan(bucketLog, bound(q.Since), upper(q.Until), func(_ string, v []byte) error {
			if err := checkCtx(); err != nil {
				return err
			}
			return visit(v)
		})
	}
	prefix := q.RequestID + "/"
	from, to := prefix, store.PrefixEnd(prefix)
	if !q.Since.IsZero() {
		from = prefix + bound(q.Since)
	}
	if !q.Until.IsZero() {
		to = prefix + upper(q.Until)
	}
	return tx.Scan(bucketByReq, from, to, func(k string, _ []byte) error {
		if err := checkCtx(); err != nil {
			return err
		}
		v, err := tx.Get(bucketLog, strings.TrimPrefix(k, prefix))
		if err != nil {
			return fmt.Errorf("audit: index entry %s: %w", k, err)
		}
		return visit(v)
	})
}

// List returns up to limit records matching q (0: no limit).
func List(ctx context.Context, s store.Store, q Query, limit int) ([]Record, error) {
	var out []Record
	err := Each(ctx, s, q, func(r *Record) error {
		out = append(out, *r)
		if limit > 0 && len(out) >= limit {
			return store.ErrStop
		}
		return nil
	})
	if errors.Is(err, store.ErrStop) {
		err = nil
	}
	return out, err
}

// Count returns the total number of records ever appended.
func Count(ctx context.Context, s store.Store) (uint64, error) {
	var n uint64
	err := s.View(ctx, func(tx store.Tx) error {
		var err error
		n, err = store.Seq(tx, "audit")
		return err
	})
	return n, err
}

// CSVHeader is the column order of CSV exports.
var CSVHeader = []string{"seq", "time", "request_id", "actor", "surface", "action", "from", "to", "detail"}

// formulaStart holds the characters that make a spreadsheet read a cell
// beginning with one as a formula (OWASP, CSV injection).
const formulaStart = "=+-@\t\r"

// neutralise prefixes each of fields that begins with a formulaStart
// character with a single quote, so a spreadsheet shows it as text; it
// changes fields in place and returns them.
func neutralise(fields []string) []string {
	for i, f := range fields {
		if f != "" && strings.IndexByte(formulaStart, f[0]) >= 0 {
			fields[i] = "'" + f
		}
	}
	return fields
}

// csvFields renders r as CSV fields into buf (reused between records).
func csvFields(r *Record, buf []string) []string {
	return append(buf[:0],
		strconv.FormatUint(r.Seq, 10),
		r.Time.Format(time.RFC3339Nano),
		r.RequestID, r.Actor, r.Surface, r.Action, r.From, r.To, r.Detail)
}
