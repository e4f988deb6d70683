package runners

import "testing"

// callKey is the key of body sent with local token local in MCP session
// session, and whether body is sent again (see gate).
func callKey(local string, session int, body []byte) (string, bool) {
	m, ok := parseCall(body)
	if !ok {
		return "", false
	}
	return m.key(local, session), true
}

// TestCallKey: a call's key is the same for the same message of the same
// turn and session (whitespace in its params aside), and differs with the
// turn's local token, the session, the id, the method or the params; a
// notification is sent again with no key; a batch or a body that is no
// JSON-RPC message is sent once.
func TestCallKey(t *testing.T) {
	const call = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_agent","arguments":{"agent":"b","text":"x"}}}`
	k, again := callKey("rl_a", 1, []byte(call))
	if k == "" || !again {
		t.Fatalf("a call: key %q, again %v; want a key", k, again)
	}
	if k2, _ := callKey("rl_a", 1, []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name": "ask_agent", "arguments": {"agent": "b", "text": "x"}}}`)); k2 != k {
		t.Errorf("the same call, spaced out: key %q, want %q", k2, k)
	}
	if k2, _ := callKey("rl_a", 2, []byte(call)); k2 == k || k2 == "" {
		t.Errorf("the same call in the next session: key %q, want another key than %q", k2, k)
	}
	for name, other := range map[string][2]string{
		"another turn":   {"rl_b", call},
		"another id":     {"rl_a", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ask_agent","arguments":{"agent":"b","text":"x"}}}`},
		"a string id":    {"rl_a", `{"jsonrpc":"2.0","id":"3","method":"tools/call","params":{"name":"ask_agent","arguments":{"agent":"b","text":"x"}}}`},
		"another method": {"rl_a", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"name":"ask_agent","arguments":{"agent":"b","text":"x"}}}`},
		"other params":   {"rl_a", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_agent","arguments":{"agent":"b","text":"y"}}}`},
	} {
		if k2, _ := callKey(other[0], 1, []byte(other[1])); k2 == k || k2 == "" {
			t.Errorf("%s: key %q, want another key than %q", name, k2, k)
		}
	}
	if k, again := callKey("rl_a", 1, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); k != "" || !again {
		t.Errorf("a notification: key %q, again %v; want no key, sent again", k, again)
	}
	for _, body := range []string{`[` + call + `]`, `not json`, `{}`} {
		if k, again := callKey("rl_a", 1, []byte(body)); k != "" || again {
			t.Errorf("%s: key %q, again %v; want sent once, no key", body, k, again)
		}
	}
}
