package requests_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/bolt"
	bbolt "go.etcd.io/bbolt"
)

// day0 is the fake "today" of most tests: 2026-11-29, 10:00 UTC.
var day0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const (
	owner     = "acme"
	ownerUser = "slack:UOWNER"
	member    = "slack:U1"
)

// fixture is one service of owner "acme" on a real bolt file.
type fixture struct {
	path string
	db   *bolt.DB
	clk  *clock.Fake
	svc  *requests.Service
}

func openDB(t testing.TB, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bridge.db")
	f := &fixture{path: path, db: openDB(t, path), clk: clock.NewFake(day0)}
	f.svc = requests.NewService(f.db, f.clk, owner, []string{ownerUser})
	return f
}

func ask(text string) requests.Ask {
	return requests.Ask{Agent: "coder", Room: "backend", Surface: "slack", User: member, Text: text}
}

func (f *fixture) create(t testing.TB, a requests.Ask) *requests.Request {
	t.Helper()
	r, err := f.svc.Create(context.Background(), a)
	if err != nil {
		t.Fatalf("create %+v: %v", a, err)
	}
	return r
}

func (f *fixture) apply(t testing.TB, id requests.ID, e requests.Event) *requests.Request {
	t.Helper()
	r, err := f.svc.Apply(context.Background(), id, requests.Change{Event: e, Actor: ownerUser, Surface: "slack"})
	if err != nil {
		t.Fatalf("apply %s to %s: %v", e, id, err)
	}
	return r
}

// pathTo lists events that bring a new pending request to s.
var pathTo = map[requests.State][]requests.Event{
	requests.Pending:   nil,
	requests.Approved:  {requests.Approve},
	requests.Running:   {requests.Approve, requests.Start},
	requests.Done:      {requests.Approve, requests.Start, requests.Finish},
	requests.Failed:    {requests.Approve, requests.Start, requests.Fail},
	requests.Cancelled: {requests.Cancel},
	requests.Expired:   {requests.Expire},
}

// createIn creates a pending request and drives it to state s.
func (f *fixture) createIn(t testing.TB, s requests.State, text string) *requests.Request {
	t.Helper()
	r := f.create(t, ask(text))
	for _, e := range pathTo[s] {
		r = f.apply(t, r.ID, e)
	}
	if r.State != s {
		t.Fatalf("createIn %s: got %s", s, r.State)
	}
	return r
}

func auditOf(t testing.TB, db *bolt.DB, id requests.ID) []audit.Record {
	t.Helper()
	recs, err := audit.List(context.Background(), db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// dump renders every bucket and key of the bolt file, to show that a refused
// change left the store exactly as it was.
func dump(t testing.TB, db *bolt.DB) string {
	t.Helper()
	var b bytes.Buffer
	err := db.Bolt().View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bbolt.Bucket) error {
			return bk.ForEach(func(k, v []byte) error {
				fmt.Fprintf(&b, "%s/%s=%x\n", name, k, v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func ids(rs []*requests.Request) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID.String()
	}
	return out
}

func sortIDs(in []requests.ID) {
	sort.Slice(in, func(i, j int) bool { return in[i].Compare(in[j]) < 0 })
}

func mustID(t testing.TB, s string) requests.ID {
	t.Helper()
	id, err := requests.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
