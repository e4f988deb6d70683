package requests_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// fill creates n approved (queued) requests of coder, 500 to a transaction.
func (f *fixture) fill(b *testing.B, n int) {
	b.Helper()
	a := ask("benchmark: please summarise the build log of the nightly run")
	a.Approved = true
	for i := 0; i < n; i += 500 {
		err := f.db.Update(context.Background(), func(tx store.Tx) error {
			for range min(500, n-i) {
				if _, err := f.svc.CreateTx(tx, a); err != nil {
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

// BenchmarkPage: one page of 50 (the API's default) out of 20,000 requests,
// the first and one from the middle (after=), all states and one state.
func BenchmarkPage(b *testing.B) {
	f := newFixture(b)
	f.fill(b, 20000)
	all, err := f.svc.List(context.Background(), requests.Filter{})
	if err != nil {
		b.Fatal(err)
	}
	mid := all[10000].ID
	for _, c := range []struct {
		name  string
		f     requests.Filter
		after requests.ID
	}{{"first", requests.Filter{Limit: 50}, requests.ID{}}, {"middle", requests.Filter{Limit: 50}, mid},
		{"state-middle", requests.Filter{Limit: 50, State: requests.Approved}, mid}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, _, err := f.svc.Page(context.Background(), c.f, c.after)
				if err != nil || len(page) != 50 {
					b.Fatal(len(page), err)
				}
			}
		})
	}
}

// BenchmarkCreateQueueCheck: Create (fsync on) with the agent's queue at
// depth 0 and 999 under a limit of 1000: the check reads at most the limit
// of index keys.
func BenchmarkCreateQueueCheck(b *testing.B) {
	for _, depth := range []int{0, 999} {
		b.Run(fmt.Sprintf("depth-%d", depth), func(b *testing.B) {
			f := newFixture(b)
			f.fill(b, depth)
			f.svc.SetQueueLimit(1 << 30) // checked in full, never refused
			a := ask("benchmark")
			a.Approved = true
			for b.Loop() {
				if _, err := f.svc.Create(context.Background(), a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
