package approvals_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
)

// fixtureBatch is how many requests one Update of the fixture creates.
const fixtureBatch = 10_000

// benchFixture is a bolt store holding `pending` pending approvals (with
// their pending requests) that are not due, created through the real
// CreateTx path in big batched Updates. Cards are not posted for them (as if
// delivered long ago); the due approvals each iteration adds have cards.
type benchFixture struct {
	dir   string
	db    *bolt.DB
	clk   *clock.Fake
	cards *requests.Service // creates requests whose approvals post cards
	appr  *approvals.Service
	sweep *ttl.Sweeper
	made  int // due approvals made so far
}

var benchFixtures = map[int]*benchFixture{}

// benchStart is where the fixture's clock starts; due batches are created
// before it, the not-due approvals after it, and sweeps run at sweepAt.
var (
	benchStart = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	sweepAt    = benchStart.Add(23 * time.Hour)
)

func benchRooms() []config.Room {
	return []config.Room{{Name: "backend", SlackChannel: "C1", Agents: []string{"coder"}, Approvers: []string{"slack:UAPPROVER"}}}
}

func fixture(b *testing.B, pending int) *benchFixture {
	if f := benchFixtures[pending]; f != nil {
		return f
	}
	b.Helper()
	dir, err := os.MkdirTemp("", "approvals-bench")
	if err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(benchStart)
	rs := benchRooms()
	ttlDur := 24 * time.Hour

	// Not-due approvals: no surfaces, so no cards queued.
	plain := requests.NewService(db, clk, "acme", nil)
	plainAppr := approvals.New(approvals.Options{Requests: plain, Rooms: directory.New(rs, nil), TTL: ttlDur})
	plain.AddObserver("approvals", plainAppr.Observe)

	// Due approvals, and the sweeps: with the thread and the approver's DM.
	cards := requests.NewService(db, clk, "acme", nil)
	roomDir := directory.New(rs, nil, chat.Slack)
	th := threads.New(roomDir)
	cards.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: cards, Rooms: roomDir, TTL: ttlDur, Threads: th})
	cards.AddObserver("approvals", appr.Observe)
	sw, err := ttl.New(ttl.Options{Clock: clk}, appr)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	createMany(b, db, plain, clk, benchStart, pending)
	info, _ := os.Stat(db.Path())
	b.Logf("fixture: %d pending approvals in %v, bolt file %d MiB", pending, time.Since(start).Round(time.Millisecond), info.Size()>>20)
	f := &benchFixture{dir: dir, db: db, clk: clk, cards: cards, appr: appr, sweep: sw}
	benchFixtures[pending] = f
	return f
}

// createMany creates n pending requests (and so n approvals), 1 ms apart from
// from, in Updates of fixtureBatch.
func createMany(b *testing.B, db store.Store, svc *requests.Service, clk *clock.Fake, from time.Time, n int) {
	ctx := context.Background()
	for done := 0; done < n; done += fixtureBatch {
		k := min(fixtureBatch, n-done)
		err := db.Update(ctx, func(tx store.Tx) error {
			for i := 0; i < k; i++ {
				clk.Set(from.Add(time.Duration(done+i) * time.Millisecond))
				if _, err := svc.CreateTx(tx, requests.Ask{Agent: "coder", Room: "backend", Surface: chat.Slack,
					User: "slack:U" + strconv.Itoa(done+i), Text: "please deploy build " + strconv.Itoa(done+i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// addDue creates n more approvals, with cards, already due at sweepAt: each
// batch 1 ms apart, just before the previous one (there is room for any
// -benchtime: a million due approvals go back 17 minutes).
func (f *benchFixture) addDue(b *testing.B, n int) {
	if n == 0 {
		return
	}
	f.made += n
	from := sweepAt.Add(-24*time.Hour - time.Duration(f.made)*time.Millisecond)
	createMany(b, f.db, f.cards, f.clk, from, n)
}

// BenchmarkSweep measures one sweep over `pending` not-due approvals while
// `due` are due: each iteration adds `due` due approvals with their cards
// (untimed), then sweeps once (timed): every expiry moves its request to
// expired with its audit record and queues five effects (two card copies,
// the thread's outcome, its status line), in batched transactions. The
// 1,000,000 fixture takes about 30 s and 2.5 GB to build (once per size, in
// the temp dir): it runs only with ROOMBRIDGE_BIG=1. best-ms/worst-ms are
// the fastest and slowest sweep; SWEEP_PROFILE=file writes a CPU profile of
// the last timed sweep only.
func BenchmarkSweep(b *testing.B) {
	b.Cleanup(func() {
		for n, f := range benchFixtures {
			_ = f.db.Close()
			_ = os.RemoveAll(f.dir)
			delete(benchFixtures, n)
		}
	})
	cases := []struct{ pending, due int }{
		{10_000, 0}, {10_000, 1_000}, {10_000, 10_000},
		{100_000, 0}, {100_000, 1_000}, {100_000, 10_000},
	}
	if os.Getenv("ROOMBRIDGE_BIG") != "" {
		cases = append(cases, []struct{ pending, due int }{
			{1_000_000, 0}, {1_000_000, 100}, {1_000_000, 1_000}, {1_000_000, 10_000}, {1_000_000, 30_000},
		}...)
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("pending=%d/due=%d", c.pending, c.due), func(b *testing.B) {
			f := fixture(b, c.pending)
			ctx := context.Background()
			var expired int
			best, worst := time.Duration(1<<62), time.Duration(0)
			profile := os.Getenv("SWEEP_PROFILE")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f.addDue(b, c.due)
				f.clk.Set(sweepAt)
				runtime.GC() // the setup's garbage is not the sweep's
				var prof *os.File
				if profile != "" { // each sweep overwrites it: the last one is kept
					prof, _ = os.Create(profile)
					_ = pprof.StartCPUProfile(prof)
				}
				b.StartTimer()
				t0 := time.Now()
				res, err := f.sweep.SweepOnce(ctx)
				took := time.Since(t0)
				b.StopTimer()
				best, worst = min(best, took), max(worst, took)
				if prof != nil {
					pprof.StopCPUProfile()
					_ = prof.Close()
				}
				b.StartTimer()
				if err != nil {
					b.Fatal(err)
				}
				if res.Expired != c.due || res.Failed != 0 {
					b.Fatalf("sweep %+v, want %d expired", res, c.due)
				}
				expired += res.Expired
			}
			b.ReportMetric(float64(expired)/b.Elapsed().Seconds(), "expiries/s")
			b.ReportMetric(float64(best.Microseconds())/1000, "best-ms")
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
		})
	}
}
