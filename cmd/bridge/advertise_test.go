package main

import (
	"net"
	"os"
	"testing"

	"github.com/roombridge/roombridge/config"
)

// TestAdvertiseURL: ha.advertise_url when set, else the API's scheme and
// listening address, with the host name for an unspecified host.
func TestAdvertiseURL(t *testing.T) {
	host, _ := os.Hostname()
	cfg := &config.Config{HA: &config.HA{}}
	for _, c := range []struct {
		set, addr, want string
	}{
		{"", "127.0.0.1:7070", "http://127.0.0.1:7070"},
		{"", "0.0.0.0:7070", "http://" + net.JoinHostPort(host, "7070")},
		{"", "[::]:7070", "http://" + net.JoinHostPort(host, "7070")},
		{"https://bridge-a.example:7070", "0.0.0.0:7070", "https://bridge-a.example:7070"},
	} {
		cfg.HA.AdvertiseURL = c.set
		addr, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := advertiseURL(cfg, addr); got != c.want {
			t.Errorf("advertise %q, listening on %s: %s, want %s", c.set, c.addr, got, c.want)
		}
	}
}
