package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/roombridge/roombridge/store"
)

// pruneBatch is how many records one prune transaction deletes: two deletes
// each (the record and its request index entry) stay well under etcd's
// default 128 operations per transaction.
const pruneBatch = 50

// Prune deletes the records older than before, oldest first, in
// transactions of at most pruneBatch records, and returns how many it
// deleted. It reads only the expired key range (record keys start with the
// zero-padded unix milliseconds), never the whole log. Record sequence
// numbers are not reused: Count still reports every record ever appended.
func Prune(ctx context.Context, s store.Store, before time.Time) (int, error) {
	total := 0
	for {
		n := 0
		err := s.Update(ctx, func(tx store.Tx) error {
			// Collect first, delete after: deleting under a bolt cursor
			// can make it skip keys.
			var keys, reqs []string
			err := tx.Scan(bucketLog, "", bound(before), func(k string, v []byte) error {
				var r Record
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("decode %s: %w", k, err)
				}
				keys, reqs = append(keys, k), append(reqs, r.RequestID)
				if len(keys) == pruneBatch {
					return store.ErrStop
				}
				return nil
			})
			if err != nil {
				return err
			}
			for i, k := range keys {
				if reqs[i] != "" {
					if err := tx.Delete(bucketByReq, reqs[i]+"/"+k); err != nil {
						return err
					}
				}
				if err := tx.Delete(bucketLog, k); err != nil {
					return err
				}
			}
			n = len(keys)
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("audit: prune: %w", err)
		}
		total += n
		if n < pruneBatch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
