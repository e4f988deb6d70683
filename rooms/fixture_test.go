package rooms_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// roomFixture is the real core behind a room's commands: a bolt file, a
// fake clock, the requests service with the threads and approvals
// observers, and the router, for one console room "main" with the agent
// coder, owned by console:alice.
type roomFixture struct {
	db   *bolt.DB
	clk  *clock.Fake
	log  *slog.Logger
	svc  *requests.Service
	th   *threads.Threads
	appr *approvals.Service
	rt   *rooms.Router
}

func newRoomFixture(t *testing.T) *roomFixture {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return roomFixtureOn(db, clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)))
}

// roomFixtureOn is the fixture's core over db and clk: a new one over the
// same store is the core after a restart.
func roomFixtureOn(db *bolt.DB, clk *clock.Fake) *roomFixture {
	f := &roomFixture{db: db, clk: clk, log: slog.New(slog.DiscardHandler)}
	roomDir := directory.New([]config.Room{{Name: "main", Console: true, Agents: []string{"coder"}}}, []string{alice}, chat.Console)
	f.svc = requests.NewService(db, f.clk, "acme", []string{alice})
	f.th = threads.New(roomDir)
	f.svc.AddObserver("threads", f.th.Observe)
	f.appr = approvals.New(approvals.Options{Requests: f.svc, Rooms: roomDir, Threads: f.th, Log: f.log})
	f.svc.AddObserver(approvals.ObserverName, f.appr.Observe)
	f.rt = rooms.New(f.svc, f.appr, roomDir, nil, f.log)
	return f
}
