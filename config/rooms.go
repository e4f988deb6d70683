package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Room is a chat channel (or several: one per surface) bound to agents.
type Room struct {
	Name string `yaml:"name"`
	// Channels binds the room to a channel per surface: slack (a channel
	// ID), feishu (a chat ID), console (the console room's name).
	Channels map[string]string `yaml:"channels"`
	// SlackChannel, FeishuChat and Console are the older keys of Channels
	// (console: true binds the console under the room's name); they still
	// load, and Bound reads them.
	SlackChannel string   `yaml:"slack_channel"`
	FeishuChat   string   `yaml:"feishu_chat"`
	Console      bool     `yaml:"console"`
	Agents       []string `yaml:"agents"`
	Members      []string `yaml:"members"`
	Approvers    []string `yaml:"approvers"`
	// ApprovalTTL overrides approvals.ttl for this room.
	ApprovalTTL time.Duration `yaml:"approval_ttl"`
}

// roomSurfaces are the keys of channels, in the order of the older keys.
var roomSurfaces = []string{"slack", "feishu", "console"}

// binding is one surface channel of a room and the key that set it.
type binding struct {
	surface, channel, key string
}

// bindings returns r's channels, each with its key under prefix (e.g.
// rooms[0]), in the order slack, feishu, console; an old and a new key for
// the same surface, an unknown surface or an empty channel is an error
// naming the key.
func (r Room) bindings(prefix string) ([]binding, error) {
	old := map[string]binding{}
	if r.SlackChannel != "" {
		old["slack"] = binding{"slack", r.SlackChannel, prefix + ".slack_channel"}
	}
	if r.FeishuChat != "" {
		old["feishu"] = binding{"feishu", r.FeishuChat, prefix + ".feishu_chat"}
	}
	if r.Console {
		old["console"] = binding{"console", r.Name, prefix + ".console"}
	}
	for _, s := range slices.Sorted(maps.Keys(r.Channels)) {
		k := prefix + ".channels." + s
		if !slices.Contains(roomSurfaces, s) {
			return nil, keyErr(k, "unknown surface %q (want %s)", s, strings.Join(roomSurfaces, ", "))
		}
		if strings.TrimSpace(r.Channels[s]) == "" {
			return nil, keyErr(k, "empty: name the %s channel, or leave the key out", s)
		}
		if o, ok := old[s]; ok {
			return nil, keyErr(o.key, "conflicts with %s: bind the %s channel with one key (channels.%s)", k, s, s)
		}
	}
	var out []binding
	for _, s := range roomSurfaces {
		if c, ok := r.Channels[s]; ok {
			out = append(out, binding{s, c, prefix + ".channels." + s})
		} else if o, ok := old[s]; ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// Bound returns the room's channels, surface → channel, from channels and
// the older keys alike (the config's validation refuses conflicts between
// them; here channels wins).
func (r Room) Bound() map[string]string {
	out := map[string]string{}
	if r.SlackChannel != "" {
		out["slack"] = r.SlackChannel
	}
	if r.FeishuChat != "" {
		out["feishu"] = r.FeishuChat
	}
	if r.Console {
		out["console"] = r.Name
	}
	for s, c := range r.Channels {
		out[s] = c
	}
	return out
}

// validateRooms checks the rooms: names, channels (each bound to one room
// only, on a configured surface), agents and users.
func (c *Config) validateRooms() error {
	if len(c.Rooms) == 0 {
		return keyErr("rooms", "required: at least one room")
	}
	names := map[string]bool{}
	taken := map[[2]string]string{} // surface, channel → the key that bound it
	for i, r := range c.Rooms {
		k := fmt.Sprintf("rooms[%d]", i)
		if r.Name == "" {
			return keyErr(k+".name", "required")
		}
		if names[r.Name] {
			return keyErr(k+".name", "duplicate room %q", r.Name)
		}
		names[r.Name] = true
		bs, err := r.bindings(k)
		if err != nil {
			return err
		}
		if len(bs) == 0 {
			return keyErr(k, "bind the room to a channel: channels: {slack: C0123, feishu: oc_abc, console: %s}", r.Name)
		}
		for _, b := range bs {
			if b.surface == "slack" && c.Slack == nil || b.surface == "feishu" && c.Feishu == nil {
				return keyErr(b.key, "set, but there is no %s section", b.surface)
			}
			if first, dup := taken[[2]string{b.surface, b.channel}]; dup {
				return keyErr(b.key, "%s channel %q is bound to another room already (%s)", b.surface, b.channel, first)
			}
			taken[[2]string{b.surface, b.channel}] = b.key
		}
		if err := c.validateRoomMembers(k, r); err != nil {
			return err
		}
	}
	return nil
}

// validateRoomMembers checks a room's agents, members, approvers and TTL.
func (c *Config) validateRoomMembers(k string, r Room) error {
	if len(r.Agents) == 0 {
		return keyErr(k+".agents", "required: at least one agent")
	}
	for j, a := range r.Agents {
		if _, ok := c.Agents[a]; !ok {
			return keyErr(fmt.Sprintf("%s.agents[%d]", k, j), "unknown agent %q", a)
		}
	}
	for _, list := range []struct {
		key   string
		users []string
	}{{"members", r.Members}, {"approvers", r.Approvers}} {
		for j, u := range list.users {
			if !userRE.MatchString(u) {
				return keyErr(fmt.Sprintf("%s.%s[%d]", k, list.key, j), "%q is not a user (want surface:id)", u)
			}
		}
	}
	if r.ApprovalTTL < 0 {
		return keyErr(k+".approval_ttl", "must not be negative")
	}
	return nil
}
