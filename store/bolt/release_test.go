package bolt

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/store"
	bbolt "go.etcd.io/bbolt"
)

// The span ReleaseMemory drops lies inside the file's mapping even when
// bbolt has grown the file past it (as it does, by up to 16 MiB ahead):
// madvise beyond the mapping would drop whatever memory follows it. (A
// file outgrows its mapping only past initialMmap: mapped as it grows.)
func TestReleaseStaysInTheMapping(t *testing.T) {
	was := initialMmap
	initialMmap = 0
	defer func() { initialMmap = was }()
	path := filepath.Join(t.TempDir(), "bridge.db")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	value := make([]byte, 8<<10)
	for round := 0; ; round++ {
		if err := d.Update(ctx, func(tx store.Tx) error {
			for i := range 256 {
				if err := tx.Put("b", fmt.Sprintf("%04d-%03d", round, i), value); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		start, end := mapping(t, path)
		if st.Size() <= int64(end-start) {
			if round == 100 {
				t.Fatalf("the file (%d bytes) never outgrew its mapping (%d)", st.Size(), end-start)
			}
			continue
		}
		err = d.db.View(func(btx *bbolt.Tx) error {
			addr, n := mappedSpan(btx)
			if addr != start || n == 0 || addr+n > end {
				t.Errorf("released [%#x, %#x), the mapping is [%#x, %#x) and the file %d bytes", addr, addr+n, start, end, st.Size())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !t.Failed() { // never madvise a span found wrong
			d.ReleaseMemory()
		}
		return
	}
}

// mapping is the address range of path's mapping in this process.
func mapping(t *testing.T, path string) (start, end uintptr) {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("maps line %q", sc.Text())
		}
		return uintptr(s), uintptr(e)
	}
	t.Fatalf("%s is not mapped", path)
	return 0, 0
}
