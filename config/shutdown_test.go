package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const minimal = `owner: acme
rooms: [{name: main, console: true, agents: [coder]}]
agents: {coder: {command: [demo]}}
`

// log.format and shutdown.grace: defaults, accepted values, and errors that
// name the key.
func TestLogFormatAndShutdownGrace(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Format != "text" || c.Shutdown.Grace != DefaultGrace {
		t.Errorf("defaults: log.format %q, shutdown.grace %v; want text, %v", c.Log.Format, c.Shutdown.Grace, DefaultGrace)
	}
	c, err = Parse([]byte(minimal + "log: {format: json}\nshutdown: {grace: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Format != "json" || c.Shutdown.Grace != 5*time.Second {
		t.Errorf("set: log.format %q, shutdown.grace %v; want json, 5s", c.Log.Format, c.Shutdown.Grace)
	}
	for _, bad := range []struct{ yaml, key string }{
		{"log: {format: xml}\n", "log.format"},
		{"log: {format: JSON}\n", "log.format"},
		{"shutdown: {grace: -1s}\n", "shutdown.grace"},
		{"shutdown: {grace: soon}\n", "shutdown.grace"},
		{"shutdown: {timeout: 5s}\n", "shutdown.timeout"},
	} {
		_, err := Parse([]byte(minimal + bad.yaml))
		var ke *Error
		if !errors.As(err, &ke) && (err == nil || !strings.Contains(err.Error(), bad.key)) {
			t.Errorf("%q: error %v; want one naming %s", bad.yaml, err, bad.key)
			continue
		}
		if ke != nil && ke.Key != bad.key {
			t.Errorf("%q: error names %q; want %s", bad.yaml, ke.Key, bad.key)
		}
	}
	if err := CheckLogFormat("json"); err != nil {
		t.Errorf("json: %v", err)
	}
}
