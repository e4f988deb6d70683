package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/roombridge/roombridge/store"
)

// tailSlack is how far before the latest record it has read Tail looks for
// new records. A record's time is its writer's clock, taken before the
// commit (an expiry keeps its sweep's start time), so a record committed
// later may sort a little earlier; one further back than this is still
// found, by a second, full read (see Tail).
const tailSlack = 10 * time.Minute

// Cursor is how far Tail has read the log.
type Cursor struct {
	// Seq: every record numbered up to Seq has been read (or was appended
	// before the cursor was made).
	Seq uint64
	// Time is the latest time among the records read.
	Time time.Time
}

// End returns a cursor at the end of the log: Tail from it reads only the
// records appended afterwards.
func End(ctx context.Context, s store.Store, now time.Time) (Cursor, error) {
	c := Cursor{Time: now.UTC()}
	err := s.View(ctx, func(tx store.Tx) error {
		var err error
		c.Seq, err = store.Seq(tx, "audit")
		return err
	})
	if err != nil {
		return Cursor{}, fmt.Errorf("audit: tail: %w", err)
	}
	return c, nil
}

// Tail calls fn for every record appended after c (mostly in time order), and
// returns the cursor past them. On an error (fn's ends the walk) c is
// returned unchanged, and the next Tail from it sees the same records. It
// reads one snapshot: the records numbered up to the log's count there are
// all committed (numbers are taken in the appending transactions, so they
// commit in order). It reads the keys from tailSlack before c.Time and
// decodes only the new records; if some new record was not found there (a
// clock that went back, or a pruned record), it reads the older keys too.
func Tail(ctx context.Context, s store.Store, c Cursor, fn func(*Record) error) (Cursor, error) {
	next := c
	err := s.View(ctx, func(tx store.Tx) error {
		next = c
		last, err := store.Seq(tx, "audit")
		if err != nil || last <= c.Seq {
			return err
		}
		from := ""
		if !c.Time.IsZero() {
			from = bound(c.Time.Add(-tailSlack))
		}
		found := uint64(0)
		visit := func(k string, v []byte) error {
			if seq, err := strconv.ParseUint(k[min(len(k), 14):], 10, 64); err == nil && (seq <= c.Seq || seq > last) {
				return nil // read before, or appended after the snapshot's count (not possible: defensive)
			}
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			if r.Seq <= c.Seq || r.Seq > last {
				return nil
			}
			found++
			if r.Time.After(next.Time) {
				next.Time = r.Time
			}
			if found%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			return fn(&r)
		}
		if err := tx.Scan(bucketLog, from, "", visit); err != nil {
			return err
		}
		if found < last-c.Seq && from != "" {
			if err := tx.Scan(bucketLog, "", from, visit); err != nil {
				return err
			}
		}
		next.Seq = last
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("audit: tail: %w", err)
	}
	return next, nil
}
