package web

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/roombridge/roombridge/runners"
)

// Runners are the runners that host agents on other machines
// (*runners.Hub): each with its agents and connection; Changed is closed
// at the next change of a connection (the room pages redraw).
type Runners interface {
	Statuses(ctx context.Context) ([]runners.Status, error)
	Changed() <-chan struct{}
}

// runnerRow is a line of a room's runners: a runner hosting one of the
// room's agents.
type runnerRow struct {
	Name        string
	Agents      []string // the room's agents it hosts (not other rooms')
	State       string   // connected, disconnected (within the grace), away, never connected
	LastContact time.Time
}

// roomRunners lists the runners that host any of agents, by name, each
// with those of agents it hosts (none without a hub or runners: the room
// page then shows no section).
func (s *Server) roomRunners(ctx context.Context, agents []string) ([]runnerRow, error) {
	if s.remote == nil {
		return nil, nil
	}
	all, err := s.remote.Statuses(ctx)
	if err != nil {
		return nil, err
	}
	var out []runnerRow
	for _, st := range all {
		mine := slices.DeleteFunc(slices.Clone(st.Agents), func(a string) bool { return !slices.Contains(agents, a) })
		if len(mine) == 0 {
			continue
		}
		row := runnerRow{Name: st.Name, Agents: mine, LastContact: st.LastContact}
		switch {
		case st.Connected:
			row.State = "connected"
		case st.LastContact.IsZero():
			row.State = "never connected"
		case st.Away:
			row.State = "away"
		default:
			row.State = "disconnected"
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b runnerRow) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// runnerChanges wakes wake at each change of a runner's connection
// (changes is the hub's Changed, taken before the stream's first flush)
// until done.
func (s *Server) runnerChanges(done <-chan struct{}, changes <-chan struct{}, wake chan<- struct{}) {
	for {
		select {
		case <-done:
			return
		case <-changes:
			changes = s.remote.Changed() // before the wake: the page's fetch then sees every change up to here
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}
