package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"

	"github.com/roombridge/roombridge/store"
)

// Format is an export format.
type Format string

// Export formats.
const (
	JSONL Format = "jsonl"
	CSV   Format = "csv"
)

// ParseFormat validates an export format name ("" means JSONL).
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case JSONL, CSV:
		return Format(s), nil
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
// mapped pages, for stores that map their file (bolt).
const releaseEvery = 65536

// memoryReleaser is a store whose reads map a file into memory.
type memoryReleaser interface{ ReleaseMemory() }

// Export streams the records matching q to w in format f, in constant memory,
// and returns how many it wrote.
func Export(ctx context.Context, s store.Store, q Query, f Format, w io.Writer, progress Progress) (uint64, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	var write func(*Record) error
	flush := bw.Flush
	switch f {
	case CSV:
		cw := csv.NewWriter(bw)
		if err := cw.Write(CSVHeader); err != nil {
			return 0, fmt.Errorf("audit: export: %w", err)
		}
		var fields []string
		write = func(r *Record) error {
			fields = csvFields(r, fields)
			return cw.Write(fields)
		}
		flush = func() error {
			cw.Flush()
			if err := cw.Error(); err != nil {
				return err
			}
			return bw.Flush()
		}
	case JSONL:
		enc := json.NewEncoder(bw)
		write = func(r *Record) error { return enc.Encode(r) }
	default:
		return 0, fmt.Errorf("audit: export: unknown format %q", f)
	}
	var n uint64
	release, _ := s.(memoryReleaser)
	err := Each(ctx, s, q, func(r *Record) error {
		if err := write(r); err != nil {
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
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("audit: export: %w", err)
	}
	if progress != nil {
		progress(n, true)
	}
	return n, nil
}
