package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/store"
)

// MigratingKey, in store.MetaBucket, holds the format a migration is
// moving the store to while it runs: a crash leaves it, and the next run
// says it resumes.
const MigratingKey = "migrating"

// Action is the audit action of a finished step.
const Action = "store_migrated"

// Options configure Run.
type Options struct {
	// Known is the newest format this binary knows.
	Known int
	// Steps are this binary's steps, in order (steps[i].To == i+2).
	Steps []Step
	// DryRun writes nothing: each step says what it would change.
	DryRun bool
	// Now stamps the audit records (default time.Now).
	Now func() time.Time
	// Log receives the start, progress and end of each step.
	Log *slog.Logger
	// ProgressEvery bounds how often a step's progress is logged (default
	// 2 s).
	ProgressEvery time.Duration
}

// Done is what one step did (or, dry, would do).
type Done struct {
	From, To int
	Name     string
	Counts   Counts
	// Resumed: an earlier run of this step was cut off.
	Resumed bool
}

// Result is what Run did: the store's format before and after, and the
// steps.
type Result struct {
	From, To int
	// Created: the store was empty and was stamped with Known.
	Created bool
	Steps   []Done
}

// Check reads st's format and refuses one newer than known
// (*store.FormatError) or a restore that did not finish
// (store.ErrRestoring). It writes nothing.
func Check(ctx context.Context, st store.Store, known int) (int, error) {
	var f int
	err := st.View(ctx, func(tx store.Tx) error {
		var err error
		f, err = store.ReadFormat(tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	return f, store.CheckFormat(f, known)
}

// Run brings st to o.Known: an empty store is stamped with it; an older one
// is moved by each step in turn, each finished in one transaction that
// writes its format and its store_migrated audit record (from, to, counts).
// A run cut off anywhere is resumed by the next: a step's batches are
// idempotent, and the format moves only when a step is done. A store newer
// than o.Known is refused (*store.FormatError). In HA the leader calls Run
// under its fence, before its other work.
func Run(ctx context.Context, st store.Store, o Options) (Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 2 * time.Second
	}
	f, err := Check(ctx, st, o.Known)
	res := Result{From: f, To: f}
	if err != nil {
		return res, err
	}
	if f == 0 {
		stamped, err := create(ctx, st, o)
		if err != nil || stamped {
			res.Created, res.To = true, o.Known
			return res, err
		}
		// Written to before it was stamped (in HA, by this binary's API
		// between the term's start and this run): as old as can be.
		f, res.From, res.To = store.UnversionedFormat, store.UnversionedFormat, store.UnversionedFormat
	}
	for f < o.Known {
		s, err := stepTo(o.Steps, f+1)
		if err != nil {
			return res, err
		}
		d, err := runStep(ctx, st, o, s)
		res.Steps = append(res.Steps, d)
		if err != nil {
			return res, err
		}
		f = s.To
		if !o.DryRun {
			res.To = f
		}
	}
	return res, nil
}

// create stamps an empty store with o.Known, and tells whether it did (it
// holds data by now: not).
func create(ctx context.Context, st store.Store, o Options) (stamped bool, err error) {
	if o.DryRun {
		return true, nil
	}
	err = st.Update(ctx, func(tx store.Tx) error {
		f, err := store.ReadFormat(tx)
		if stamped = err == nil && f == 0; !stamped {
			return err
		}
		return store.WriteFormat(tx, o.Known)
	})
	if err != nil {
		return false, fmt.Errorf("migrate: stamp a new store with format %d: %w", o.Known, err)
	}
	if stamped {
		o.Log.Info("store: a new store, format written", "format", o.Known)
	}
	return stamped, nil
}

// stepTo returns the step that produces format to.
func stepTo(steps []Step, to int) (Step, error) {
	for _, s := range steps {
		if s.To == to {
			return s, nil
		}
	}
	return Step{}, fmt.Errorf("migrate: this binary has no step to format %d", to)
}

// runStep runs one step and, unless dry, finishes it: the format, the mark
// cleared and the audit record in one transaction.
func runStep(ctx context.Context, st store.Store, o Options, s Step) (Done, error) {
	d := Done{From: s.To - 1, To: s.To, Name: s.Name}
	log := o.Log.With("step", s.Name, "from", d.From, "to", d.To)
	if !o.DryRun {
		resumed, err := mark(ctx, st, s.To)
		if err != nil {
			return d, err
		}
		d.Resumed = resumed
	}
	log.Info("store: migrating", "dry_run", o.DryRun, "resumed", d.Resumed)
	start, last := time.Now(), time.Now()
	counts, err := s.Run(ctx, st, o.DryRun, func(done int) {
		if time.Since(last) >= o.ProgressEvery {
			last = time.Now()
			log.Info("store: migrating: progress", "records", done, "elapsed", time.Since(start).Round(time.Millisecond))
		}
	})
	d.Counts = counts
	if err != nil {
		return d, fmt.Errorf("migrate: step %d (%s): %w", s.To, s.Name, err)
	}
	if o.DryRun {
		return d, nil
	}
	if err := finish(ctx, st, o, &d); err != nil {
		return d, err
	}
	log.Info("store: migrated", "counts", fmt.Sprint(d.Counts), "took", time.Since(start).Round(time.Millisecond))
	return d, nil
}

// progressMark is MigratingKey's value: the step that runs and what its
// committed batches changed so far, over every run of it.
type progressMark struct {
	To     int    `json:"to"`
	Counts Counts `json:"counts,omitempty"`
}

// readMark reads the mark ({} when there is none, or it is of an older
// binary: the format number alone).
func readMark(tx store.Tx) (progressMark, error) {
	var m progressMark
	v, err := tx.Get(store.MetaBucket, MigratingKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return m, nil
	case err != nil:
		return m, err
	}
	if json.Unmarshal(v, &m) != nil {
		m.To, _ = strconv.Atoi(string(v))
	}
	return m, nil
}

func writeMark(tx store.Tx, m progressMark) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return tx.Put(store.MetaBucket, MigratingKey, b)
}

// mark records that a step to format to runs, and tells whether an
// earlier run of it was cut off (its counts are kept).
func mark(ctx context.Context, st store.Store, to int) (resumed bool, err error) {
	err = st.Update(ctx, func(tx store.Tx) error {
		m, err := readMark(tx)
		if err != nil {
			return err
		}
		if resumed = m.To == to; !resumed {
			m = progressMark{To: to}
		}
		return writeMark(tx, m)
	})
	if err != nil {
		return false, fmt.Errorf("migrate: mark step %d: %w", to, err)
	}
	return resumed, nil
}

// batchOwnWrites is the keys Batch writes beside its function's: the
// step's progress mark.
const batchOwnWrites = 1

// Batch runs fn, one batch of the step to format to, in one transaction,
// and adds what fn counted to the step's mark in the same transaction: a
// step resumed after a crash reports what all its runs did. Steps write
// through it; fn writes at most BatchWrites keys.
func Batch(ctx context.Context, st store.Store, to int, fn func(tx store.Tx) (Counts, error)) (Counts, error) {
	var got Counts
	err := st.Update(ctx, func(tx store.Tx) error {
		var err error
		if got, err = fn(tx); err != nil {
			return err
		}
		m, err := readMark(tx)
		if err != nil {
			return err
		}
		if m.To != to {
			return fmt.Errorf("migrate: a batch of step %d, but the store's mark is of step %d", to, m.To)
		}
		if m.Counts == nil {
			m.Counts = Counts{}
		}
		for k, n := range got {
			m.Counts[k] += n
		}
		failpoint.AtCommit(tx, failpoint.MigrateBatch)
		return writeMark(tx, m)
	})
	return got, err
}

// finish moves the format to d.To, clears the mark and audits, in one
// transaction that first checks the format is still d.From (another run
// finished the step: nothing is written twice).
func finish(ctx context.Context, st store.Store, o Options, d *Done) error {
	err := st.Update(ctx, func(tx store.Tx) error {
		f, err := store.ReadFormat(tx)
		if err != nil {
			return err
		}
		if f != d.From {
			return fmt.Errorf("the store's format moved to %d meanwhile", f)
		}
		m, err := readMark(tx)
		if err != nil {
			return err
		}
		if m.To == d.To && m.Counts != nil {
			d.Counts = m.Counts // every run's batches
		}
		detail, err := json.Marshal(struct {
			Step    string `json:"step"`
			Counts  Counts `json:"counts"`
			Resumed bool   `json:"resumed,omitempty"`
		}{d.Name, d.Counts, d.Resumed})
		if err != nil {
			return err
		}
		if err := store.WriteFormat(tx, d.To); err != nil {
			return err
		}
		if err := tx.Delete(store.MetaBucket, MigratingKey); err != nil {
			return err
		}
		failpoint.AtCommit(tx, failpoint.MigrateDone)
		return audit.Append(tx, audit.Record{Time: o.Now(), Actor: "bridge", Action: Action,
			From: "format " + strconv.Itoa(d.From), To: "format " + strconv.Itoa(d.To), Detail: string(detail)})
	})
	if err != nil {
		return fmt.Errorf("migrate: finish step %d (%s): %w", d.To, d.Name, err)
	}
	return nil
}
