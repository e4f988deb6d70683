package migrate

import (
	"context"

	"github.com/roombridge/roombridge/store"
)

// LeanDedupe (format 2) folds a dedupe key's expiry timer into the key: the
// value already carries the expiry, so a new event's dedupe key is one
// write instead of two, and the hourly purge reads the keys themselves
// (store.PurgeDedupe). The step deletes format 1's dedupe timers from the
// expiry index. A new binary's writes while it runs add none: it tolerates
// them.
var LeanDedupe = Step{To: leanDedupe, Name: "lean-dedupe", Run: runLeanDedupe}

// leanDedupe is the format LeanDedupe produces.
const leanDedupe = 2

// stepBatch bounds the keys one transaction of a step writes (an etcd
// store's MaxWrites lowers it).
const stepBatch = 1000

// BatchWrites is how many keys a step's batch function may write: at most
// stepBatch, and within st's limit on one Update's writes (an etcd Txn's
// ops, fenced or not) less the progress mark Batch writes beside them.
func BatchWrites(st store.Store) int {
	if m, ok := st.(interface{ MaxWrites() int }); ok && m.MaxWrites()-batchOwnWrites < stepBatch {
		return max(1, m.MaxWrites()-batchOwnWrites)
	}
	return stepBatch
}

func runLeanDedupe(ctx context.Context, st store.Store, dry bool, progress func(int)) (Counts, error) {
	if dry {
		var n int
		err := st.View(ctx, func(tx store.Tx) error {
			var err error
			n, err = store.DropDedupeTimers(tx, 0, true)
			return err
		})
		return Counts{"dedupe_timers": n}, err
	}
	batch, total := BatchWrites(st), 0
	for {
		got, err := Batch(ctx, st, leanDedupe, func(tx store.Tx) (Counts, error) {
			n, err := store.DropDedupeTimers(tx, batch, false)
			return Counts{"dedupe_timers": n}, err
		})
		n := got["dedupe_timers"]
		if err != nil {
			return Counts{"dedupe_timers": total}, err
		}
		total += n
		if progress != nil {
			progress(total)
		}
		if n < batch {
			return Counts{"dedupe_timers": total}, nil
		}
	}
}
