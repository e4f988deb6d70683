package approvals_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
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
	"github.com/roombridge/roombridge/store/etcd"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
	"github.com/roombridge/roombridge/threads"
	"github.com/roombridge/roombridge/ttl"
)

// benchFixture is a store holding `pending` pending approvals (with their
// pending requests) that are not due, created through the real CreateTx
// path in big batched Updates (small ones on etcd). Cards are not posted
// for them (as if delivered long ago); the due approvals each iteration adds
// have cards.
type benchFixture struct {
	dir   string // bolt: the file's directory, removed at the end
	db    store.Store
	per   int // requests created per Update
	clk   *clock.Fake
	cards *requests.Service // creates requests whose approvals post cards
	appr  *approvals.Service
	sweep *ttl.Sweeper
	made  int // due approvals made so far
}

// fixtureKey names a fixture: its backend and pending count.
type fixtureKey struct {
	backend string
	pending int
}

var benchFixtures = map[fixtureKey]*benchFixture{}

// benchStart is where the fixture's clock starts; due batches are created
// before it, the not-due approvals after it, and sweeps run at sweepAt.
var (
	benchStart = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	sweepAt    = benchStart.Add(23 * time.Hour)
)

// benchTTL is the fixture's approval TTL.
const benchTTL = 24 * time.Hour

func benchRooms() []config.Room {
	return []config.Room{{Name: "backend", SlackChannel: "C1", Agents: []string{"coder"}, Approvers: []string{"slack:UAPPROVER"}}}
}

// openBench opens the backend's store for top (the benchmark whose end
// closes it): a bolt file in a temp dir, or an in-process etcd member
// (etcdtest, loopback, fsync on, no fence).
func openBench(top *testing.B, backend string) (store.Store, string, int) {
	if backend == "etcd" {
		cli := etcdtest.Start(top).Client(top)
		db, err := etcd.New(cli, etcd.Options{Prefix: "/bench/store"})
		if err != nil {
			top.Fatal(err)
		}
		top.Cleanup(func() { _ = db.Close() })
		return db, "", 4 // a creation with cards writes ~20 keys: 4 fit a Txn
	}
	dir, err := os.MkdirTemp("", "approvals-bench")
	if err != nil {
		top.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		top.Fatal(err)
	}
	top.Cleanup(func() {
		_ = db.Close()
		_ = os.RemoveAll(dir)
	})
	return db, dir, 10_000
}

func fixture(top, b *testing.B, backend string, pending int) *benchFixture {
	key := fixtureKey{backend, pending}
	if f := benchFixtures[key]; f != nil {
		return f
	}
	b.Helper()
	db, dir, per := openBench(top, backend)
	top.Cleanup(func() { delete(benchFixtures, key) })
	clk := clock.NewFake(benchStart)

	// Not-due approvals: no surfaces, so no cards queued.
	plain := requests.NewService(db, clk, "acme", nil)
	plainAppr := approvals.New(approvals.Options{Requests: plain, Rooms: directory.New(benchRooms(), nil), TTL: benchTTL})
	plain.AddObserver(approvals.ObserverName, plainAppr.Observe)

	// Due approvals, and the sweeps: with the thread and the approver's DM.
	cards, appr, sw := cardServices(b, db, clk)
	f := &benchFixture{dir: dir, db: db, per: per, clk: clk, cards: cards, appr: appr, sweep: sw}
	start := time.Now()
	f.createMany(b, plain, benchStart, pending)
	size := ""
	if bdb, ok := db.(*bolt.DB); ok {
		info, _ := os.Stat(bdb.Path())
		size = fmt.Sprintf(", bolt file %d MiB", info.Size()>>20)
	}
	b.Logf("fixture: %d pending approvals on %s in %v%s", pending, backend, time.Since(start).Round(time.Millisecond), size)
	benchFixtures[key] = f
	return f
}

// cardServices are the services of the fixture's due approvals, on db:
// their requests post cards in the thread and the approver's DM, and the
// sweeper expires them.
func cardServices(b *testing.B, db store.Store, clk *clock.Fake) (*requests.Service, *approvals.Service, *ttl.Sweeper) {
	cards := requests.NewService(db, clk, "acme", nil)
	roomDir := directory.New(benchRooms(), nil, chat.Slack)
	th := threads.New(roomDir)
	cards.AddObserver("threads", th.Observe)
	appr := approvals.New(approvals.Options{Requests: cards, Rooms: roomDir, TTL: benchTTL, Threads: th})
	cards.AddObserver(approvals.ObserverName, appr.Observe)
	sw, err := ttl.New(ttl.Options{Clock: clk}, appr)
	if err != nil {
		b.Fatal(err)
	}
	return cards, appr, sw
}

// createMany creates n pending requests (and so n approvals), 1 ms apart from
// from, f.per per Update.
func (f *benchFixture) createMany(b *testing.B, svc *requests.Service, from time.Time, n int) {
	ctx := context.Background()
	for done := 0; done < n; done += f.per {
		k := min(f.per, n-done)
		err := f.db.Update(ctx, func(tx store.Tx) error {
			for i := 0; i < k; i++ {
				f.clk.Set(from.Add(time.Duration(done+i) * time.Millisecond))
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
	f.createMany(b, f.cards, from, n)
}

// BenchmarkSweep measures one sweep over `pending` not-due approvals while
// `due` are due, on bolt: each iteration adds `due` due approvals with their
// cards (untimed), then sweeps once (timed): every expiry moves its request
// to expired with its audit record and queues the one effect that stands
// for its thread's (the card's copy there, the outcome, the status line,
// the retry offer: rendered when the outbox delivers it), in batched
// transactions. The 1,000,000 fixture takes about 20 s and 1.5 GB to
// build (once per size, in the temp dir): it runs only with
// ROOMBRIDGE_BIG=1. median-ms, best-ms and worst-ms are of the sweeps;
// cpu-ms is the median CPU time (user and system, the whole process) one
// sweep took, which a loaded machine inflates less than the wall time;
// pages/expiry is what bbolt wrote per expiry (bolt only); write-wait-ms
// is the longest a lone small Update, made one after the other during
// each sweep, took (what another writer, an inbound event, waits behind
// the sweep's commits), the worst of the sweeps' (none when nothing is
// due);
// SWEEP_PROFILE=file writes a CPU profile of the last timed sweep only.
func BenchmarkSweep(b *testing.B) {
	cases := []sweepCase{
		{10_000, 0}, {10_000, 1_000}, {10_000, 10_000},
		{100_000, 0}, {100_000, 1_000}, {100_000, 10_000},
	}
	if os.Getenv("ROOMBRIDGE_BIG") != "" {
		cases = append(cases, []sweepCase{
			{1_000_000, 0}, {1_000_000, 100}, {1_000_000, 1_000}, {1_000_000, 10_000}, {1_000_000, 30_000},
		}...)
	}
	benchSweep(b, "bolt", cases)
}

// BenchmarkSweepEtcd is BenchmarkSweep on one in-process etcd member
// (loopback, fsync on; its CPU counts in cpu-ms), over 10,000 pending; 10,000
// due (about 20 s a sweep, 10 s to create them) only with ROOMBRIDGE_BIG=1.
func BenchmarkSweepEtcd(b *testing.B) {
	cases := []sweepCase{{10_000, 0}, {10_000, 1_000}}
	if os.Getenv("ROOMBRIDGE_BIG") != "" {
		cases = append(cases, sweepCase{10_000, 10_000})
	}
	benchSweep(b, "etcd", cases)
}

type sweepCase struct{ pending, due int }

func benchSweep(top *testing.B, backend string, cases []sweepCase) {
	for _, c := range cases {
		top.Run(fmt.Sprintf("pending=%d/due=%d", c.pending, c.due), func(b *testing.B) {
			f := fixture(top, b, backend, c.pending)
			ctx := context.Background()
			var expired int
			var pages int64
			var took, cpu []time.Duration
			var wait time.Duration
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
				p0 := f.pagesWritten()
				c0, t0 := cpuTime(), time.Now()
				probed := probeWrites(f.db, c.due > 0)
				res, err := f.sweep.SweepOnce(ctx)
				took, cpu = append(took, time.Since(t0)), append(cpu, cpuTime()-c0)
				w, perr := probed()
				wait = max(wait, w)
				pages += f.pagesWritten() - p0
				b.StopTimer()
				if prof != nil {
					pprof.StopCPUProfile()
					_ = prof.Close()
				}
				b.StartTimer()
				if err == nil {
					err = perr
				}
				if err != nil {
					b.Fatal(err)
				}
				if res.Expired != c.due || res.Failed != 0 {
					b.Fatalf("sweep %+v, want %d expired", res, c.due)
				}
				expired += res.Expired
			}
			b.ReportMetric(float64(expired)/b.Elapsed().Seconds(), "expiries/s")
			slices.Sort(took)
			b.ReportMetric(ms(took[len(took)/2]), "median-ms")
			b.ReportMetric(ms(took[0]), "best-ms")
			b.ReportMetric(ms(took[len(took)-1]), "worst-ms")
			b.ReportMetric(ms(wait), "write-wait-ms")
			slices.Sort(cpu)
			b.ReportMetric(ms(cpu[len(cpu)/2]), "cpu-ms")
			if _, ok := f.db.(*bolt.DB); ok && expired > 0 {
				b.ReportMetric(float64(pages)/float64(expired), "pages/expiry")
			}
		})
	}
}

// probeWrites makes small Updates of db, one after the other, until the
// func it returns is called, which returns the longest one took (and the
// first error); none unless on.
func probeWrites(db store.Store, on bool) func() (time.Duration, error) {
	if !on {
		return func() (time.Duration, error) { return 0, nil }
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var worst time.Duration
	var err error
	go func() {
		defer close(done)
		for i := 0; err == nil; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			err = db.Update(context.Background(), func(tx store.Tx) error {
				return tx.Put("bench_probe", strconv.Itoa(i%16), []byte("x"))
			})
			worst = max(worst, time.Since(t0))
		}
	}()
	return func() (time.Duration, error) { close(stop); <-done; return worst, err }
}

// pagesWritten is how many pages the bolt store has written so far (0 on
// etcd).
func (f *benchFixture) pagesWritten() int64 {
	if bdb, ok := f.db.(*bolt.DB); ok {
		st := bdb.Bolt().Stats()
		return st.TxStats.GetWrite()
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
