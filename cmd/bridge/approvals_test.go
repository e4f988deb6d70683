package main

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestApprovalsEndToEnd drives approvals through the console, the CLI and
// the HTTP API of one daemon: a non-owner's ask shows its card with its
// buttons as typed commands and sits in the inbox; `bridge approve` settles
// it and the card is updated in the console; a conflicting `bridge deny` is
// refused naming who decided; `bridge revoke` cancels the user's waiting
// request; the inbox and tasks endpoints answer.
func TestApprovalsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	p := startBridge(t, dir, []string{"USER=alice"}, "run", "--http", "127.0.0.1:0")
	base, tok := p.api(filepath.Join(dir, ".roombridge"))
	day := time.Now().UTC().Format("20060102")
	id1, id2, id3 := "R"+day+"-01", "R"+day+"-02", "R"+day+"-03"
	q := regexp.QuoteMeta

	p.send("/as bob")
	p.send("@coder echo one")
	i := p.waitLine(0, q("* "+id1+" → coder (pending)"))
	p.waitLine(0, q(id1+" | type: approve "+id1+" | deny "+id1))
	p.send("inbox")
	p.waitLine(i, q("* inbox of console: 1 waiting, oldest first"))
	p.waitLine(i, `^  1 of 1 · `+q(id1)+` · console:bob asks coder \(pending\): echo one`)

	out, errOut, code := runCLI(t, dir, "approve", "R-01")
	if code != 0 || !strings.HasPrefix(out, id1+" approved\napproved by api:token at ") {
		t.Fatalf("bridge approve: code %d, out %q, err %q", code, out, errOut)
	}
	p.waitLine(i, q(id1+" | approved by api:token at "))
	p.waitLine(i, q(id1+" | final: one"))
	_, errOut, code = runCLI(t, dir, "deny", id1)
	if code != 1 || !strings.Contains(errOut, id1+" was already approved by api:token at ") || !strings.Contains(errOut, "HTTP 409") {
		t.Fatalf("bridge deny after approve: code %d, stderr %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, dir, "deny", "R-1"); code != 1 || !strings.Contains(errOut, "malformed approval ID") {
		t.Fatalf("bridge deny R-1: code %d, stderr %q", code, errOut)
	}

	p.send("@coder echo two")
	j := p.waitLine(i, q("* "+id2+" → coder (pending)"))
	out, errOut, code = runCLI(t, dir, "revoke", "console:bob")
	if code != 0 || !strings.Contains(out, "console:bob revoked: 1 waiting request(s) cancelled") || !strings.Contains(out, id2) {
		t.Fatalf("bridge revoke: code %d, out %q, err %q", code, out, errOut)
	}
	p.waitLine(j, q(id2+" | status: cancelled: access of console:bob revoked by api:token"))
	p.waitLine(j, q(id2+" | withdrawn at "))
	if _, errOut, code = runCLI(t, dir, "revoke", "bob"); code != 1 || !strings.Contains(errOut, "malformed user") {
		t.Fatalf("bridge revoke bob: code %d, stderr %q", code, errOut)
	}

	var inbox struct {
		Count int `json:"count"`
	}
	if c := call(t, http.MethodGet, base+"/v1/rooms/console/inbox", tok, nil, &inbox); c != http.StatusOK || inbox.Count != 0 {
		t.Fatalf("inbox: %d %+v", c, inbox)
	}
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/v1/rooms/nope/inbox", http.StatusNotFound},
		{http.MethodGet, "/v1/rooms/nope/tasks", http.StatusNotFound},
		{http.MethodPost, "/v1/approvals/R-99/approve", http.StatusNotFound},
		{http.MethodPost, "/v1/approvals/R-1/deny", http.StatusBadRequest},
		{http.MethodPost, "/v1/users/bob/revoke", http.StatusBadRequest},
		{http.MethodPost, "/v1/approvals/" + id1 + "/deny", http.StatusConflict},
	} {
		var e struct {
			Error string `json:"error"`
		}
		if got := call(t, c.method, base+c.path, tok, nil, &e); got != c.want || e.Error == "" {
			t.Errorf("%s %s: %d %q, want %d with an error", c.method, c.path, got, e.Error, c.want)
		}
	}

	// What runs now: an owner's request while its tool runs.
	p.send("/as alice")
	p.send("@coder tool build 3s; echo three")
	p.waitLine(j, q("* "+id3+" → coder (approved)"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		var tasks struct {
			Tasks []struct {
				RequestID string `json:"request_id"`
				Activity  string `json:"activity"`
			} `json:"tasks"`
			Count int `json:"count"`
		}
		call(t, http.MethodGet, base+"/v1/rooms/console/tasks", tok, nil, &tasks)
		if tasks.Count == 1 && tasks.Tasks[0].RequestID == id3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks never listed %s: %+v", id3, tasks)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A question of an agent (ask_user), answered with `bridge answer`;
	// a second answer is refused naming who answered.
	id4 := "R" + day + "-04"
	p.send("@coder question which colour?")
	k := p.waitLine(j, q("* "+id4+" → coder (approved)"))
	p.waitLine(k, q("which colour?"))
	out, errOut, code = runCLI(t, dir, "answer", "R-04.q1", "deep", "blue")
	if code != 0 || !strings.HasPrefix(out, id4+".q1 answered\n") {
		t.Fatalf("bridge answer: code %d, out %q, err %q", code, out, errOut)
	}
	p.waitLine(k, q(id4+" | final: answer: deep blue"))
	_, errOut, code = runCLI(t, dir, "answer", id4+".q1", "red")
	if code != 1 || !strings.Contains(errOut, "already answered by api:token") || !strings.Contains(errOut, "HTTP 409") {
		t.Fatalf("second bridge answer: code %d, stderr %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, dir, "answer", "R-04.q1"); code != 2 || !strings.Contains(errOut, "answer needs") {
		t.Fatalf("bridge answer without text: code %d, stderr %q", code, errOut)
	}
}
