package config

import (
	"errors"
	"testing"
)

// ha.advertise_url: a URL with a scheme and a host, or an error naming the
// key.
func TestAdvertiseURL(t *testing.T) {
	c, err := Parse([]byte(minimal + "ha: {etcd: [127.0.0.1:2379], advertise_url: \"https://bridge-a.example:7070\"}\n"))
	if err != nil || c.HA.AdvertiseURL != "https://bridge-a.example:7070" {
		t.Fatalf("Parse: %v, %+v", err, c)
	}
	for _, bad := range []string{"bridge-a.example:7070", "ftp://bridge-a.example", "https://"} {
		_, err := Parse([]byte(minimal + "ha: {etcd: [127.0.0.1:2379], advertise_url: \"" + bad + "\"}\n"))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "ha.advertise_url" {
			t.Errorf("advertise_url %q: %v; want an error about ha.advertise_url", bad, err)
		}
	}
}
