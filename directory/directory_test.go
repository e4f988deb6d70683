package directory_test

import (
	"testing"

	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/directory"
)

func TestDirectory(t *testing.T) {
	rs := []config.Room{
		{Name: "backend", Channels: map[string]string{"slack": "C1", "feishu": "oc_1"}, Members: []string{"slack:U1"}, Approvers: []string{"slack:UA"}},
		{Name: "ops", FeishuChat: "oc_2", Console: true}, // the older keys
	}
	d := directory.New(rs, []string{"console:boss"}, "feishu", "console")
	for _, c := range []struct{ surface, channel, room string }{
		{"slack", "C1", "backend"}, {"feishu", "oc_1", "backend"}, {"feishu", "oc_2", "ops"},
		{"console", "ops", "ops"}, {"console", "backend", ""}, {"slack", "", ""},
	} {
		r, ok := d.Room(c.surface, c.channel)
		if r.Name != c.room || ok != (c.room != "") {
			t.Errorf("Room(%s, %s) = %q %v, want %q", c.surface, c.channel, r.Name, ok, c.room)
		}
	}
	if r, ok := d.Named("ops"); !ok || r.Name != "ops" {
		t.Errorf("Named(ops) = %v %v", r, ok)
	}
	// Place: the asking surface if bound there and running, else the first
	// bound running one (slack does not run).
	for _, c := range []struct{ room, askedOn, surface, channel string }{
		{"backend", "feishu", "feishu", "oc_1"}, {"backend", "slack", "feishu", "oc_1"},
		{"ops", "console", "console", "ops"}, {"ops", "api", "feishu", "oc_2"}, {"gone", "slack", "", ""},
	} {
		s, ch, ok := d.Place(c.room, c.askedOn)
		if s != c.surface || ch != c.channel || ok != (c.surface != "") {
			t.Errorf("Place(%s, %s) = %s %s %v, want %s %s", c.room, c.askedOn, s, ch, ok, c.surface, c.channel)
		}
	}
	for _, c := range []struct {
		room, user  string
		ask, decide bool
	}{
		{"backend", "slack:U1", true, false}, {"backend", "slack:U2", false, false}, {"backend", "slack:UA", true, true},
		{"backend", "console:boss", true, true}, {"backend", "api:token", true, true}, {"ops", "feishu:anyone", true, false},
	} {
		if got := d.MayAsk(c.room, c.user); got != c.ask {
			t.Errorf("MayAsk(%s, %s) = %v", c.room, c.user, got)
		}
		if got := d.MayDecide(c.room, c.user); got != c.decide {
			t.Errorf("MayDecide(%s, %s) = %v", c.room, c.user, got)
		}
	}
	if !d.MayRevoke("console:boss") || d.MayRevoke("slack:UA") || !d.Running("feishu") || d.Running("slack") {
		t.Error("MayRevoke or Running")
	}
}
