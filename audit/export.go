package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/roombridge/roombridge/store"
)

// Format is an export format.
type Format string

// Export formats.
const (
	JSONL Format = "jsonl"
	CSV   Format = "csv"
)

// ParseFormat validates an export format name, in any case ("" means
// JSONL).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case JSONL, CSV:
		return f, nil
	case "":
		return JSONL, nil
	}
	return "", fmt.Errorf("audit: unknown format %q (want jsonl or csv)", s)
}

// Progress is told how many records have been written so far: every few
// thousand records, and once more with done set at the end.
type Progress func(records uint64, done bool)

// progressEvery is how many records pass between two Progress calls.
const progressEvery = 8192

// releaseEvery is how many records pass between two releases of the store's
// mapped pages, for stores that map their file (bolt): about 10 MiB of a
// bolt audit bucket (half-full leaves), so a 1,000,000-record export peaks
// near 21 MiB of RSS (TestExportMemory).
const releaseEvery = 16384

// memoryReleaser is a store transaction that reads a file mapped into
// memory (store/bolt's), whose resident pages it can drop.
type memoryReleaser interface{ ReleaseMemory() }

// Export streams the records matching q to w in format f, in constant memory,
// and returns how many it wrote. Records are read in place (rawRecord):
// JSONL writes each stored object as it is (it is json.Marshal's output, so
// what encoding/json would write again), CSV writes its fields through
// csv.Writer without a copy; a record not in the shape Append stores is
// decoded and written the long way.
func Export(ctx context.Context, s store.Store, q Query, f Format, w io.Writer, progress Progress) (uint64, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	out, err := newWriters(f, bw)
	if err != nil {
		return 0, fmt.Errorf("audit: export: %w", err)
	}
	var n uint64
	var raw rawRecord
	var rec Record
	err = s.View(ctx, func(tx store.Tx) error {
		release, _ := tx.(memoryReleaser)
		return eachRaw(ctx, tx, q, func(v []byte) error {
			ok := raw.parse(v)
			var in bool
			var err error
			if ok {
				in, err = raw.inRange(q)
				ok = err == nil
			}
			switch {
			case !ok:
				rec = Record{}
				if err := json.Unmarshal(v, &rec); err != nil {
					return fmt.Errorf("audit: decode: %w", err)
				}
				if !q.holds(rec.Time) {
					return nil
				}
				err = out.record(&rec)
			case !in:
				return nil
			default:
				err = out.raw(&raw, v)
			}
			if err != nil {
				return err
			}
			n++
			if release != nil && n%releaseEvery == 0 {
				release.ReleaseMemory()
			}
			if progress != nil && n%progressEvery == 0 {
				progress(n, false)
			}
			return nil
		})
	})
	if err == nil {
		err = out.flush()
	}
	if err != nil {
		return n, fmt.Errorf("audit: export: %w", err)
	}
	if progress != nil {
		progress(n, true)
	}
	return n, nil
}

// writers write records in one format: decoded ones, ones read in place
// (with their stored bytes), and the end.
type writers struct {
	record func(*Record) error
	raw    func(r *rawRecord, stored []byte) error
	flush  func() error
}

// newWriters returns the writers of format f onto bw (the CSV header
// written).
func newWriters(f Format, bw *bufio.Writer) (writers, error) {
	switch f {
	case CSV:
		cw := csv.NewWriter(bw)
		if err := cw.Write(CSVHeader); err != nil {
			return writers{}, err
		}
		var fields []string
		return writers{
			record: func(r *Record) error {
				fields = csvFields(r, fields)
				return cw.Write(neutralise(fields))
			},
			raw: func(r *rawRecord, _ []byte) error {
				fs, err := r.Strings()
				if err != nil {
					return err
				}
				return cw.Write(neutralise(fs))
			},
			flush: func() error {
				cw.Flush()
				if err := cw.Error(); err != nil {
					return err
				}
				return bw.Flush()
			},
		}, nil
	case JSONL:
		enc := json.NewEncoder(bw)
		return writers{
			record: func(r *Record) error { return enc.Encode(r) },
			raw: func(_ *rawRecord, stored []byte) error {
				if _, err := bw.Write(stored); err != nil {
					return err
				}
				return bw.WriteByte('\n')
			},
			flush: bw.Flush,
		}, nil
	}
	return writers{}, fmt.Errorf("unknown format %q", f)
}
