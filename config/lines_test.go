package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestErrorsNameKeyAndLine: a value of the wrong type, an unknown key, a key
// set twice and a value Validate refuses each give one *Error naming the
// key's path and the line of that key (not of its value), with a message
// in the config's words, not Go's.
func TestErrorsNameKeyAndLine(t *testing.T) {
	// minimal is three lines: what follows starts on line 4.
	for _, c := range []struct {
		name, yaml, key string
		line            int
		msg             string
	}{
		{"duration in a flow mapping", "shutdown: {grace: abc}\n", "shutdown.grace", 4,
			`"abc" is not a duration (like 30s, 5m or 1h)`},
		{"duration on the next line", "shutdown:\n  grace:\n    abc\n", "shutdown.grace", 5,
			`"abc" is not a duration (like 30s, 5m or 1h)`},
		{"a list for a duration", "# a comment\nshutdown:\n  grace: [1]\n", "shutdown.grace", 6,
			"a list is not a duration (like 30s, 5m or 1h)"},
		{"a number for a section", "shutdown: 5\n", "shutdown", 4, `"5" is not a mapping of keys`},
		{"text for a number", "limits:\n  request_bytes: lots\n", "limits.request_bytes", 5, `"lots" is not a whole number`},
		{"a list for text", "http:\n  addr: [1, 2]\n", "http.addr", 5, "a list is not a text value"},
		{"text for a bool", "web:\n  enabled: sometimes\n", "web.enabled", 5, `"sometimes" is not true or false`},
		{"unknown key", "shutdown:\n  gracee: 1s\n", "shutdown.gracee", 5, "unknown key"},
		{"key set twice", "log: {level: info}\nlog: {level: warn}\n", "log", 5, "set twice (first at line 4)"},
		{"refused by Validate", "\nlog:\n  level: loud\n", "log.level", 6,
			`unknown level "loud" (want debug, info, warn or error)`},
		{"refused by Validate, in a list", "owner: acme\nagents: {coder: {command: [demo]}}\nrooms: [{name: main, console: true,\n  agents: [coder,\n    ghost]}]\n",
			"rooms[0].agents[1]", 5, `unknown agent "ghost"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := minimal + c.yaml
			if strings.HasPrefix(c.yaml, "owner:") {
				text = c.yaml // a whole file
			}
			_, err := Parse([]byte(text))
			var ke *Error
			if !errors.As(err, &ke) {
				t.Fatalf("error %v, want a *config.Error", err)
			}
			if ke.Key != c.key || ke.Line != c.line || ke.Msg != c.msg {
				t.Errorf("error %q: key %q, line %d, message %q\nwant key %q, line %d, message %q", err, ke.Key, ke.Line, ke.Msg, c.key, c.line, c.msg)
			}
			if want := "config: " + c.key + ": " + c.msg + " at line " + strconv.Itoa(c.line); err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}
