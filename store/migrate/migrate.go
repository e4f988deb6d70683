// Package migrate moves a store from one format to the next: numbered steps,
// one function each, run by the leader under its fence before any other work,
// resumable after a crash at any point, recorded and audited.
package migrate

import (
	"context"

	"github.com/roombridge/roombridge/store"
)

// Counts says what a step changed (or, dry, would change), by kind:
// {"approvals": 12, "requests": 40}.
type Counts map[string]int

// Step moves a store from format To-1 to format To.
type Step struct {
	// To is the format the step produces.
	To int
	// Name is short and stable, e.g. "lean-dedupe".
	Name string
	// Run does the step in batches of bounded size, each through Batch
	// (its own transaction, which adds its counts to the step's mark). It
	// must be resumable: after a crash anywhere it is run
	// again from the start and finishes the job, duplicating nothing (each
	// batch idempotent). With dryRun it writes nothing and returns what it
	// would change. progress, if not nil, is called after each batch with
	// the number of records done so far.
	Run func(ctx context.Context, st store.Store, dryRun bool, progress func(done int)) (Counts, error)
}
