package process

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
)

// stdinWriter writes messages to the agent's stdin from its own goroutine,
// so that an agent that does not read never blocks the turn. Write errors
// (the agent exited) are dropped: the outcome is judged from stdout and the
// exit status. send and close are called from the turn's loop only.
type stdinWriter struct {
	msgs   chan any
	closed bool
}

func newStdinWriter(w io.WriteCloser) *stdinWriter {
	s := &stdinWriter{msgs: make(chan any, 64)}
	go func() {
		defer w.Close()
		enc := json.NewEncoder(w)
		for m := range s.msgs {
			if err := enc.Encode(m); err != nil {
				for range s.msgs {
				}
				return
			}
		}
	}()
	return s
}

// send queues m; it never blocks the turn (a full queue drops the message:
// only an agent that reads nothing fills it). After close it does nothing.
func (s *stdinWriter) send(m any) {
	if s.closed {
		return
	}
	select {
	case s.msgs <- m:
	default:
	}
}

// close ends stdin after the queued messages.
func (s *stdinWriter) close() {
	if !s.closed {
		s.closed = true
		close(s.msgs)
	}
}

// Environ is environ without the variables named in hide: what an agent
// process inherits from the bridge (the config's secrets are hidden).
func Environ(environ, hide []string) []string {
	if len(hide) == 0 {
		return environ
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(hide, name) {
			out = append(out, kv)
		}
	}
	return out
}
