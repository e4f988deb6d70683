// Package directory is the room directory: which room a surface channel
// is, each room by name, where a request's thread is posted, and who may ask
// and decide in a room. rooms, threads and approvals all ask it.
package directory

import (
	"slices"
	"strings"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/config"
)

// Surfaces are the surfaces a room can be bound to, in the order a thread's
// place falls back through.
var Surfaces = []string{chat.Slack, chat.Feishu, chat.Console}

// Rooms is the directory of the configured rooms. It does not change after
// New, so it is safe for concurrent use.
type Rooms struct {
	rooms   []config.Room // in the config's order
	byName  map[string]int
	byChan  map[binding]int
	bound   []map[string]string // per room: surface → channel
	owners  map[string]bool
	running map[string]bool
}

type binding struct{ surface, channel string }

// New returns the directory of rooms (as validated by config: a channel
// bound to two rooms is the first one's), whose owners may do anything in
// every room; running are the surfaces with a running connector.
func New(rooms []config.Room, owners []string, running ...string) *Rooms {
	d := &Rooms{rooms: rooms, byName: map[string]int{}, byChan: map[binding]int{},
		owners: map[string]bool{}, running: map[string]bool{}}
	for i, r := range rooms {
		if _, dup := d.byName[r.Name]; !dup {
			d.byName[r.Name] = i
		}
		ch := r.Bound()
		d.bound = append(d.bound, ch)
		for s, c := range ch {
			if _, dup := d.byChan[binding{s, c}]; !dup {
				d.byChan[binding{s, c}] = i
			}
		}
	}
	for _, u := range owners {
		d.owners[u] = true
	}
	for _, s := range running {
		d.running[s] = true
	}
	return d
}

// All returns the rooms in the config's order.
func (d *Rooms) All() []config.Room { return slices.Clone(d.rooms) }

// Room returns the room that channel of surface is bound to.
func (d *Rooms) Room(surface, channel string) (config.Room, bool) {
	i, ok := d.byChan[binding{surface, channel}]
	if !ok || channel == "" {
		return config.Room{}, false
	}
	return d.rooms[i], true
}

// Named returns the room called name.
func (d *Rooms) Named(name string) (config.Room, bool) {
	i, ok := d.byName[name]
	if !ok {
		return config.Room{}, false
	}
	return d.rooms[i], true
}

// Channel returns the channel room is bound to on surface ("" if none).
func (d *Rooms) Channel(room, surface string) string {
	i, ok := d.byName[room]
	if !ok {
		return ""
	}
	return d.bound[i][surface]
}

// Running reports whether surface has a running connector.
func (d *Rooms) Running(surface string) bool { return d.running[surface] }

// Place returns the surface and channel of the thread of a request asked in
// room on surface askedOn: that surface if the room is bound there and it
// runs, else the room's first bound surface that runs (Slack, Feishu,
// console).
func (d *Rooms) Place(room, askedOn string) (surface, channel string, ok bool) {
	if c := d.Channel(room, askedOn); c != "" && d.running[askedOn] {
		return askedOn, c, true
	}
	for _, s := range Surfaces {
		if c := d.Channel(room, s); c != "" && d.running[s] {
			return s, c, true
		}
	}
	return "", "", false
}

// IsOwner reports whether user (surface:id) is an owner.
func (d *Rooms) IsOwner(user string) bool { return d.owners[user] }

// privileged reports whether user may do anything anywhere: an owner, or
// the holder of the API token.
func (d *Rooms) privileged(user string) bool {
	return d.owners[user] || strings.HasPrefix(user, chat.API+":")
}

// MayAsk reports whether user may ask agents in room (and answer the
// questions shown there): owners, holders of the API token, approvers, and
// members (everyone, when the room lists no members — also in a room no
// longer configured).
func (d *Rooms) MayAsk(room, user string) bool {
	r, _ := d.Named(room)
	return d.privileged(user) || len(r.Members) == 0 ||
		slices.Contains(r.Members, user) || slices.Contains(r.Approvers, user)
}

// MayDecide reports whether user may approve or deny in room: its approvers
// and the owners (and holders of the API token).
func (d *Rooms) MayDecide(room, user string) bool {
	r, _ := d.Named(room)
	return d.privileged(user) || slices.Contains(r.Approvers, user)
}

// MayRevoke reports whether user may revoke users (in every room): owners
// and holders of the API token.
func (d *Rooms) MayRevoke(user string) bool { return d.privileged(user) }

// Approvers returns the approvers of room.
func (d *Rooms) Approvers(room string) []string {
	r, _ := d.Named(room)
	return r.Approvers
}

// ApprovalTTL returns room's own approval TTL (0: the configured default).
func (d *Rooms) ApprovalTTL(room string) time.Duration {
	r, _ := d.Named(room)
	return r.ApprovalTTL
}
