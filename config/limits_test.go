package config

import (
	"errors"
	"testing"
	"time"
)

// limits.request_bytes and ha.keepalive: defaults, accepted values, and
// errors that name the key.
func TestLimitsAndKeepAlive(t *testing.T) {
	c, err := Parse([]byte(minimal + "ha: {etcd: [127.0.0.1:2379]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.RequestBytes != DefaultRequestBytes || c.HA.KeepAlive != DefaultKeepAlive {
		t.Errorf("defaults: limits.request_bytes %d, ha.keepalive %v; want %d, %v", c.Limits.RequestBytes, c.HA.KeepAlive, DefaultRequestBytes, DefaultKeepAlive)
	}
	c, err = Parse([]byte(minimal + "limits: {request_bytes: 65536}\nha: {etcd: [127.0.0.1:2379], keepalive: 30s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.RequestBytes != 65536 || c.HA.KeepAlive != 30*time.Second {
		t.Errorf("set: %d, %v", c.Limits.RequestBytes, c.HA.KeepAlive)
	}
	for key, extra := range map[string]string{
		"limits.request_bytes": "limits: {request_bytes: 10000000}\n",
		"ha.keepalive":         "ha: {etcd: [127.0.0.1:2379], keepalive: 2s}\n",
	} {
		_, err := Parse([]byte(minimal + extra))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%q: %v; want an error about %s", extra, err, key)
		}
	}
}
