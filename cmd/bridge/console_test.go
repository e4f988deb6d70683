package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConsoleEndToEnd drives `bridge run` with no config through its console:
// an owner's ask runs at once; another user's ask waits for approval, which
// that user may not give and the owner may; the person sees the ID, the
// thread's lines, the status changes and the final answer.
func TestConsoleEndToEnd(t *testing.T) {
	dir := t.TempDir()
	p := startBridge(t, dir, []string{"USER=alice"}, "run", "--http", "127.0.0.1:0")
	p.api(filepath.Join(dir, ".roombridge"))
	day := time.Now().UTC().Format("20060102")
	id1, id2 := "R"+day+"-01", "R"+day+"-02"

	p.send("@coder say looking; progress 50 halfway; tool build 500ms; echo all good")
	i := p.waitLine(0, regexp.QuoteMeta("* "+id1+" → coder (approved)"))
	p.waitLine(0, regexp.QuoteMeta("== "+id1+" · coder · asked by console:alice =="))
	p.waitLine(0, regexp.QuoteMeta(id1+" | looking"))
	// Status edits coalesce: while the tool runs the status shows 50%.
	p.waitLine(0, regexp.QuoteMeta(id1+" | status: running · 50%"))
	fin := p.waitLine(0, regexp.QuoteMeta(id1+" | final: all good"))
	done := p.waitLine(0, regexp.QuoteMeta(id1+" | status: done"))
	if fin > done {
		t.Errorf("the final answer (line %d) came after the done status (line %d)", fin, done)
	}

	p.send("/as bob")
	p.waitLine(i, regexp.QuoteMeta("* you are now console:bob"))
	p.send("@reviewer check " + id1)
	p.waitLine(i, regexp.QuoteMeta("* "+id2+" → reviewer (pending)"))
	p.waitLine(i, regexp.QuoteMeta(id2+" | status: pending approval"))
	p.send("approve R-02")
	refused := p.waitLine(i, `^! .*console:bob may not approve`)
	p.send("/as alice")
	p.send("approve R-02")
	p.waitLine(refused, regexp.QuoteMeta("* "+id2+" approved"))
	final := p.waitLine(refused, regexp.QuoteMeta(id2+" | final: echo: check "+id1))
	// The referenced request's result reached the new request's turn.
	p.waitLine(final, regexp.QuoteMeta("references: "+id1+" (done): all good"))
	p.waitLine(refused, regexp.QuoteMeta(id2+" | status: done"))

	p.send("show R-99")
	p.waitLine(final, `^! unknown request R`+day+`-99$`)
	p.send("cancel " + id1)
	p.waitLine(final, `^! `+regexp.QuoteMeta(id1)+` has already ended \(done\)$`)
	p.send("retry " + id1)
	p.waitLine(final, regexp.QuoteMeta("* R"+day+"-03 → coder (approved), retry of "+id1))
	p.waitLine(final, regexp.QuoteMeta("R"+day+"-03 | final: all good"))

	// Exactly one final answer per request.
	for _, id := range []string{id1, id2} {
		n := 0
		for _, l := range p.Lines() {
			if strings.Contains(l, id+" | final:") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d final answers, want 1", id, n)
		}
	}
}
