package approvals_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/store/bolt"
)

// layout rewrites a recorded expiry's bbolt calls as another layout of the
// store would make them.
type layout struct {
	name string
	op   func(op recOp) []recOp
}

// sweepLayouts are the layouts BenchmarkSweepLayouts weighs against
// today's: an expiry that writes a small state key where it rewrites the
// approval's and the request's records; one that writes neither (a lower
// bound of any state-key layout); one that leaves the approval's index
// keys (its timers, inbox and open keys) in place.
var sweepLayouts = []layout{
	{"state-keys", func(op recOp) []recOp {
		if op.kind == 'p' && (op.bucket == "approvals" || op.bucket == "requests") {
			op.bucket, op.value = op.bucket+"_state", make([]byte, 48)
		}
		return []recOp{op}
	}},
	{"no-record-writes", func(op recOp) []recOp {
		if op.kind == 'p' && (op.bucket == "approvals" || op.bucket == "requests") {
			return nil
		}
		return []recOp{op}
	}},
	{"lazy-pending-indexes", func(op recOp) []recOp {
		if op.kind == 'd' && (op.bucket == "approvals_inbox" || op.bucket == "approvals_open" ||
			op.bucket == "timers" && strings.HasPrefix(op.key, "approval_notice/")) {
			return nil
		}
		return []recOp{op}
	}},
	{"no-index-deletes", func(op recOp) []recOp {
		if op.kind == 'd' && (op.bucket == "timers" || op.bucket == "approvals_inbox" || op.bucket == "approvals_open") {
			return nil
		}
		return []recOp{op}
	}},
}

// BenchmarkSweepLayouts replays a sweep's recorded bbolt calls (10,000
// expiries among 100,000 pending, as BenchmarkSweepCeiling records them),
// on copies of the same file, as they are and as each of sweepLayouts
// would make them: the median of each layout's replay over today's, in
// runs whose order turns by one each time. It tells which layout change can lower the sweep's
// ceiling before one is built.
func BenchmarkSweepLayouts(b *testing.B) {
	f := fixture(b, b, "bolt", 100_000)
	rec := &recording{DB: f.db.(*bolt.DB)}
	_, _, sw := cardServices(b, rec, f.clk)
	ratios := make([][]float64, len(sweepLayouts))
	for i := 0; i < b.N; i++ {
		f.addDue(b, 10_000)
		f.clk.Set(sweepAt)
		var copies []*bolt.DB
		for j := range len(sweepLayouts) + 1 {
			copies = append(copies, copyBolt(b, f.db.(*bolt.DB), filepath.Join(f.dir, fmt.Sprintf("layout%d.db", j))))
		}
		id0 := lastTx(rec.Bolt())
		rec.start()
		if _, err := sw.SweepOnce(context.Background()); err != nil {
			b.Fatal(err)
		}
		calls := rec.stop()
		commits := lastTx(rec.Bolt()) - id0
		// Each layout and today's, in an order turned by one each run.
		runs := append([][]recCall{calls}, make([][]recCall, len(sweepLayouts))...)
		for j, l := range sweepLayouts {
			runs[j+1] = rewrite(calls, l)
		}
		took := make([]time.Duration, len(runs))
		for k := range runs {
			j := (k + i) % len(runs)
			took[j] = timeReplay(b, copies[j], runs[j], commits)
		}
		for j := range sweepLayouts {
			ratios[j] = append(ratios[j], float64(took[j+1])/float64(took[0]))
		}
		for _, cp := range copies {
			_ = cp.Close()
			_ = os.Remove(cp.Path())
		}
	}
	for j, l := range sweepLayouts {
		slices.Sort(ratios[j])
		b.ReportMetric(ratios[j][len(ratios[j])/2], l.name)
	}
}

func timeReplay(b *testing.B, db *bolt.DB, calls []recCall, commits int) time.Duration {
	runtime.GC()
	t0 := time.Now()
	if err := replay(db.Bolt(), calls, commits); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

func rewrite(calls []recCall, l layout) []recCall {
	out := make([]recCall, 0, len(calls))
	for _, c := range calls {
		ops := make([]recOp, 0, len(c.ops))
		for _, op := range c.ops {
			ops = append(ops, l.op(op)...)
		}
		out = append(out, recCall{run: c.run, ops: ops})
	}
	return out
}
