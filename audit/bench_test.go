package audit_test

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/bolt"
	bbolt "go.etcd.io/bbolt"
)

// bigRecords is the size of the export fixture.
const bigRecords = 1_000_000

var (
	bigOnce sync.Once
	bigDir  string
	bigPath string
	bigErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bigDir != "" {
		_ = os.RemoveAll(bigDir)
	}
	os.Exit(code)
}

// bigFixture builds, once per process, a bolt file holding 1,000,000 audit
// records spread over 30 days, in large Update batches of direct Appends,
// and returns its path (the file is closed).
func bigFixture(tb testing.TB) string {
	tb.Helper()
	bigOnce.Do(func() {
		bigDir, bigErr = os.MkdirTemp("", "roombridge-audit-bench-")
		if bigErr != nil {
			return
		}
		bigPath = filepath.Join(bigDir, "audit.db")
		start := time.Now()
		bigErr = buildBig(bigPath, bigRecords)
		if bigErr == nil {
			st, _ := os.Stat(bigPath)
			fmt.Fprintf(os.Stderr, "audit bench fixture: %d records, %.0f MiB, built in %v\n", bigRecords, float64(st.Size())/(1<<20), time.Since(start).Round(time.Millisecond))
		}
	})
	if bigErr != nil {
		tb.Fatal(bigErr)
	}
	return bigPath
}

func buildBig(path string, n int) error {
	db, err := bolt.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	const batch = 10_000
	actions := []struct{ action, from, to string }{
		{"create", "", "pending"}, {"approve", "pending", "approved"}, {"start", "approved", "running"}, {"finish", "running", "done"},
	}
	step := 30 * 24 * time.Hour / time.Duration(n)
	for lo := 0; lo < n; lo += batch {
		err := db.Update(context.Background(), func(tx store.Tx) error {
			for i := lo; i < min(lo+batch, n); i++ {
				a := actions[i%4]
				req := i / 4
				day := t0.Add(time.Duration(i) * step)
				if err := audit.Append(tx, audit.Record{
					Time:      day,
					RequestID: fmt.Sprintf("R%s-%02d", day.Format("20060102"), req%5000+1),
					Actor:     "slack:U" + strconv.Itoa(req%97),
					Surface:   "slack",
					Action:    a.action, From: a.from, To: a.to,
					Detail: "summarise the nightly build log, please",
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkExportCSV exports the 1,000,000 records as CSV to io.Discard.
// Target: 500,000 records/s or more (issue 20); allocs/record is what one
// record costs (the store's key string).
func BenchmarkExportCSV(b *testing.B) { benchExport(b, audit.CSV) }

// BenchmarkExportJSONL is the same in JSONL, for comparison.
func BenchmarkExportJSONL(b *testing.B) { benchExport(b, audit.JSONL) }

func benchExport(b *testing.B, f audit.Format) {
	path := bigFixture(b)
	db, err := bolt.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	var total uint64
	for b.Loop() {
		n, err := audit.Export(context.Background(), db, audit.Query{}, f, io.Discard, nil)
		if err != nil || n != bigRecords {
			b.Fatalf("exported %d, %v", n, err)
		}
		total += n
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(total), "allocs/record")
}

// memStatus reads the memory lines of /proc/self/status, in KiB.
func memStatus() map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(k, "Vm") && !strings.HasPrefix(k, "Rss") {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

func fmtMem(m map[string]int64) string {
	mib := func(k string) string { return fmt.Sprintf("%s %.1f MiB", k, float64(m[k])/1024) }
	return strings.Join([]string{mib("VmHWM"), mib("VmRSS"), mib("RssAnon"), mib("RssFile")}, ", ")
}

// TestExportMemory measures the peak RSS of exporting 1,000,000 records as
// CSV. It runs only with ROOMBRIDGE_BIG=1: the fixture takes a while. The
// export runs in a child process (this test binary again) so that building
// the fixture does not count.
func TestExportMemory(t *testing.T) {
	if path := os.Getenv("ROOMBRIDGE_EXPORT_CHILD"); path != "" {
		exportChild(t, path)
		return
	}
	if os.Getenv("ROOMBRIDGE_BIG") != "1" {
		t.Skip("set ROOMBRIDGE_BIG=1 to export 1,000,000 records and measure RSS")
	}
	path := bigFixture(t)
	st, _ := os.Stat(path)
	t.Logf("bolt file: %.1f MiB", float64(st.Size())/(1<<20))
	logBucketFill(t, path)
	for _, mode := range []string{"csv", "jsonl", "csv-dropped", "csv-chunked"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExportMemory$", "-test.v")
		cmd.Env = append(os.Environ(), "ROOMBRIDGE_EXPORT_CHILD="+path, "ROOMBRIDGE_EXPORT_MODE="+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if _, msg, ok := strings.Cut(l, "bench_test.go:"); ok && strings.Contains(msg, ": ") {
				_, msg, _ = strings.Cut(msg, ": ")
				t.Logf("%-11s %s", mode, msg)
			}
		}
	}
}

// dropMapped tells the kernel that this process no longer needs the pages of
// the bolt mapping (madvise MADV_DONTNEED on a read-only shared file
// mapping: the pages stay in the page cache and fault back in on the next
// access). Measurement only: it shows what a chunked export that releases
// the mapping as it goes would cost.
func dropMapped(_ *testing.T, db *bolt.DB, _ int64) { db.ReleaseMemory() }

// resetPeak resets VmHWM to the current RSS.
func resetPeak(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset VmHWM: %v", err)
	}
}

func exportChild(t *testing.T, path string) {
	t.Logf("before open: %s", fmtMem(memStatus()))
	start := time.Now()
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Logf("open: %v", time.Since(start).Round(time.Millisecond))
	mode := os.Getenv("ROOMBRIDGE_EXPORT_MODE")
	format, variant, _ := strings.Cut(mode, "-")
	t.Logf("after open: %s", fmtMem(memStatus()))
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if variant != "" {
		dropMapped(t, db, st.Size())
		resetPeak(t)
	}
	before := memStatus()
	t.Logf("before export: %s", fmtMem(before))
	start = time.Now()
	var n uint64
	if variant == "chunked" {
		// What a chunked export would do: release the mapping every 64k
		// records.
		cw := csv.NewWriter(io.Discard)
		err = audit.Each(context.Background(), db, audit.Query{}, func(r *audit.Record) error {
			n++
			if n%65536 == 0 {
				dropMapped(t, db, st.Size())
			}
			return cw.Write([]string{strconv.FormatUint(r.Seq, 10), r.Time.Format(time.RFC3339Nano), r.RequestID, r.Actor, r.Surface, r.Action, r.From, r.To, r.Detail})
		})
		cw.Flush()
	} else {
		n, err = audit.Export(context.Background(), db, audit.Query{}, audit.Format(format), io.Discard, nil)
	}
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	after := memStatus()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("export: %d records in %v (%.0f records/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	t.Logf("after export: %s", fmtMem(after))
	t.Logf("heap: HeapSys %.1f MiB, HeapInuse %.1f MiB, TotalAlloc %.0f MiB, NumGC %d", float64(ms.HeapSys)/(1<<20), float64(ms.HeapInuse)/(1<<20), float64(ms.TotalAlloc)/(1<<20), ms.NumGC)
}

// logBucketFill logs how full the leaf pages of the audit buckets are
// (sequential appends into bbolt's default 50% fill leave them half empty).
func logBucketFill(t *testing.T, path string) {
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.Bolt().View(func(tx *bbolt.Tx) error {
		for _, name := range []string{"audit", "audit_by_request"} {
			b := tx.Bucket([]byte(name))
			if b == nil {
				continue
			}
			s := b.Stats()
			alloc := s.LeafAlloc + s.BranchAlloc
			t.Logf("bucket %s: %d keys, %.1f MiB in pages, %.1f MiB used (%.0f%% full)", name, s.KeyN,
				float64(alloc)/(1<<20), float64(s.LeafInuse+s.BranchInuse)/(1<<20), 100*float64(s.LeafInuse+s.BranchInuse)/float64(alloc))
		}
		return nil
	})
}
