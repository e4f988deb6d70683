package runners

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// What the room and the requests' statuses say while a runner is away.
// A runner is away once it has been silent (or, since this bridge began
// leading, absent) past the grace; since is when it was last seen, or when
// this bridge began leading if it has not been seen since.

// since is when x went away and whether it was ever seen by this bridge
// (call with h.mu held).
func (h *Hub) since(x *host) (at time.Time, seen bool) {
	if x.lastSeen.IsZero() {
		return h.started, false
	}
	return x.lastSeen, true
}

// awayActivity is the activity of a running turn whose runner is away.
func awayActivity(runner string, at time.Time, seen bool) string {
	if !seen {
		return fmt.Sprintf("runner %s has not connected since %s", runner, at.Format("15:04"))
	}
	return fmt.Sprintf("interrupted: runner %s went away at %s", runner, at.Format("15:04"))
}

// awayMessage is what the room is told, once per outage.
func awayMessage(runner string, at time.Time, seen bool, agents []string) string {
	if !seen {
		return fmt.Sprintf("runner %s has not connected since %s (agents %s): its turns start when it connects",
			runner, at.Format("15:04"), strings.Join(agents, ", "))
	}
	return fmt.Sprintf("runner %s went away at %s (agents %s): its turns resume when it is back",
		runner, at.Format("15:04"), strings.Join(agents, ", "))
}

// queuedPrefix starts the activity of agent's queued requests while its
// runner is away; queuedNote is that activity.
func queuedPrefix(agent, runner string) string { return agent + "'s runner " + runner + " is away" }

func queuedNote(agent, runner string, at time.Time) string {
	return queuedPrefix(agent, runner) + " since " + at.Format("15:04")
}

// noteActor is how the hub's edits of requests appear.
const noteActor = "system:runners"

// startNotes keeps the notes of x's agents' queued requests, one worker
// per agent until x is back (call with h.mu held). Without a requests
// service or outside Run it does nothing.
func (h *Hub) startNotes(x *host) {
	if h.o.Requests == nil || h.life == nil || x.noting > 0 {
		return // its workers run until x is back
	}
	x.noting = len(x.cfg)
	ctx := h.life
	for _, a := range x.cfg {
		h.notes.Go(func() { h.keepNotes(ctx, x, a) })
	}
}

// keepNotes gives agent's queued requests the away note while x is away
// (each new one too: it wakes on the agent's queue changes), and takes it
// off them when x is back.
func (h *Hub) keepNotes(ctx context.Context, x *host, agent string) {
	sig, stop := h.o.Store.Subscribe(requests.TopicAgent(agent))
	defer stop()
	for {
		h.mu.Lock()
		note, change := "", x.change
		if x.gone {
			at, _ := h.since(x)
			note = queuedNote(agent, x.name, at)
		}
		h.mu.Unlock()
		if err := h.setNotes(ctx, agent, x.name, note); err != nil && ctx.Err() == nil {
			h.o.Log.Warn("runners: noting why queued requests wait", "runner", x.name, "agent", agent, "error", err)
		}
		if note == "" {
			// Back, the notes off: this worker ends, unless x went away
			// again meanwhile (startNotes started no other: it was running).
			h.mu.Lock()
			back := !x.gone
			if back {
				x.noting--
			}
			h.mu.Unlock()
			if back {
				return
			}
			continue
		}
		select {
		case <-sig:
		case <-change:
		case <-ctx.Done():
			return // the term ended: Run waits for its workers, the next begins at 0
		}
	}
}

// setNotes makes note the activity of agent's queued requests (note "":
// takes the away note off its queued and running ones). It writes only
// when something is to change.
func (h *Hub) setNotes(ctx context.Context, agent, runner, note string) error {
	svc, prefix := h.o.Requests, queuedPrefix(agent, runner)
	stale := func(tx store.Tx) ([]*requests.Request, error) {
		rs, err := svc.QueueTx(tx, agent, 0)
		if err != nil || note != "" {
			return rs, err
		}
		run, err := svc.RunningTx(tx, agent)
		return append(rs, run...), err
	}
	fix := func(tx store.Tx, write bool) (int, error) {
		rs, err := stale(tx)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, r := range rs {
			ours := strings.HasPrefix(r.Activity, prefix)
			if r.Activity == note || !ours && (note == "" || r.Activity != "") {
				continue // as wanted, or someone else's activity
			}
			n++
			if write {
				if _, err := svc.UpdateTx(tx, r.ID, noteActor, "", "", func(r *requests.Request) { r.Activity = note }); err != nil {
					return n, err
				}
			}
		}
		return n, nil
	}
	n := 0
	if err := h.o.Store.View(ctx, func(tx store.Tx) error {
		var err error
		n, err = fix(tx, false)
		return err
	}); err != nil || n == 0 {
		return err
	}
	return h.o.Store.Update(ctx, func(tx store.Tx) error {
		_, err := fix(tx, true)
		return err
	})
}
