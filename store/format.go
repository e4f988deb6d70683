package store

import (
	"errors"
	"fmt"
	"strconv"
)

// A store's format is the version of the layout of its buckets and records.
// It is recorded in the store itself (MetaBucket/FormatKey) when a store is
// created, and moved forward only by migrations (store/migrate).
const (
	// MetaBucket holds the store's facts about itself: its format, the
	// migration in progress.
	MetaBucket = "meta"
	// FormatKey, in MetaBucket, is the store's format in decimal ASCII.
	FormatKey = "format"
	// UnversionedFormat is the format of a store written before formats
	// were recorded: it holds data but no FormatKey.
	UnversionedFormat = 1
)

// probeBuckets are buckets every bridge that did any work has written to:
// a store without a format key but with a key in one of them is
// UnversionedFormat; without any, it is empty.
var probeBuckets = []string{BucketSeq, "requests", "audit", "approvals", bucketOutbox, bucketTimers}

// FormatError is returned when a store's format is newer than this binary
// knows.
type FormatError struct {
	// Store is the store's format; Known the newest this binary knows.
	Store, Known int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("store: the store is in format %d, newer than this binary knows (format %d): "+
		"run a bridge binary that knows format %d or later (the one that migrated it), or restore a backup taken before the upgrade",
		e.Store, e.Known, e.Store)
}

// ReadFormat returns the format of the store tx reads: the recorded one;
// UnversionedFormat when none is recorded but the store holds data; 0 when
// the store is empty (a new store, to be stamped with WriteFormat).
func ReadFormat(tx Tx) (int, error) {
	if _, err := tx.Get(MetaBucket, RestoringKey); err == nil {
		return 0, ErrRestoring
	} else if !errors.Is(err, ErrNotFound) {
		return 0, fmt.Errorf("store: read format: %w", err)
	}
	v, err := tx.Get(MetaBucket, FormatKey)
	switch {
	case err == nil:
		f, perr := parseFormat(v)
		if perr != nil {
			return 0, fmt.Errorf("store: read format: %w", perr)
		}
		return f, nil
	case !errors.Is(err, ErrNotFound):
		return 0, fmt.Errorf("store: read format: %w", err)
	}
	for _, b := range probeBuckets {
		found := false
		err := tx.Scan(b, "", "", func(string, []byte) error { found = true; return ErrStop })
		if err != nil {
			return 0, fmt.Errorf("store: read format: %w", err)
		}
		if found {
			return UnversionedFormat, nil
		}
	}
	return 0, nil
}

// ErrRestoring: the store holds a restore that did not finish.
var ErrRestoring = errors.New("store: a restore into this store did not finish (it holds meta/restoring): stop every bridge on it, empty the data_dir or etcd prefix, and restore again")

// parseFormat reads a FormatKey value.
func parseFormat(v []byte) (int, error) {
	f, err := strconv.Atoi(string(v))
	if err != nil || f < 1 {
		return 0, fmt.Errorf("%s/%s holds %q, not a format number", MetaBucket, FormatKey, v)
	}
	return f, nil
}

// WriteFormat records f as the store's format.
func WriteFormat(tx Tx, f int) error {
	if err := tx.Put(MetaBucket, FormatKey, []byte(strconv.Itoa(f))); err != nil {
		return fmt.Errorf("store: write format: %w", err)
	}
	return nil
}

// CheckFormat returns a *FormatError when format is newer than known.
func CheckFormat(format, known int) error {
	if format > known {
		return &FormatError{Store: format, Known: known}
	}
	return nil
}
