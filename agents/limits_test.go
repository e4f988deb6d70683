package agents_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/internal/syncbuf"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/etcd/etcdtest"
)

// bothStores runs f on a bolt env and on an etcd env (an in-process etcd
// server, whose transactions hold at most maxTxn bytes; 0: the default).
func bothStores(t *testing.T, maxTxn int, f func(t *testing.T, e *env)) {
	t.Run("bolt", func(t *testing.T) { f(t, newEnv(t)) })
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		f(t, newEnvOn(t, srv.Client(t), maxTxn))
	})
}

// TestRequestLimit (issue 14, item 1): a 300 KB ask is refused when it is
// made, with an error naming the limit and its key; a 600 KB result and a
// 300 KB message are stored cut at the limit with a marker (the work was
// done: never refused); and the agent's next request runs. Before the fix,
// on etcd the turn's end did not fit one transaction: the scheduler re-ran
// the agent forever and its queue stood still.
func TestRequestLimit(t *testing.T) {
	bothStores(t, 0, func(t *testing.T, e *env) {
		e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
		limit := e.svc.MaxBytes()
		_, err := e.svc.Create(e.ctx, requests.Ask{Agent: "coder", Room: "main", Surface: "console", User: alice,
			Text: "echo " + strings.Repeat("a", 300<<10)})
		var tl *requests.TooLargeError
		if !errors.Is(err, requests.ErrTooLarge) || !errors.As(err, &tl) || !strings.Contains(err.Error(), requests.LimitKey) {
			t.Fatalf("300 KB ask: %v; want requests.ErrTooLarge naming %s", err, requests.LimitKey)
		}
		if tl.Limit != limit || tl.Size <= limit {
			t.Errorf("refusal %+v; want size over limit %d", tl, limit)
		}
		long := e.ask(alice, "coder", "long 600000")
		big := e.ask(alice, "coder", "big 300000; echo said it")
		next := e.ask(alice, "coder", "echo next")
		r := e.waitState(long.ID, requests.Done)
		if len(r.Result) > limit || !strings.HasPrefix(r.Result, "xxx") || !strings.Contains(r.Result, requests.LimitKey) {
			t.Errorf("600 KB result stored as %d bytes ending %q; want at most %d, cut with a marker naming %s",
				len(r.Result), r.Result[max(len(r.Result)-60, 0):], limit, requests.LimitKey)
		}
		e.waitState(big.ID, requests.Done)
		msgs := e.replies(big.ID)
		if len(msgs) == 0 || len(msgs[0].Text) > limit || !strings.Contains(msgs[0].Text, "[cut: ") {
			t.Errorf("300 KB message: %d replies; want the first cut to at most %d bytes", len(msgs), limit)
		}
		if r := e.waitState(next.ID, requests.Done); r.Result != "next" {
			t.Errorf("next request: result %q", r.Result)
		}
		for _, id := range []requests.ID{long.ID, big.ID} {
			if e.hasAudit(id, "interrupted", "") {
				t.Errorf("%s: a false interrupted record:\n%s", id, e.auditText(id))
			}
		}
	})
}

// TestEndTooLargeFailsOne (item 1): when the end of a turn cannot be
// stored for a permanent reason (here etcd's transaction limit, set lower
// than what the end writes), that request fails with the reason, its turn
// is not run again, and the agent's next request runs.
func TestEndTooLargeFailsOne(t *testing.T) {
	srv := etcdtest.Start(t)
	e := newEnvOn(t, srv.Client(t), 48<<10)
	e.start(nil, agents.Agent{Name: "coder", Runtime: e.exec()})
	huge := e.ask(alice, "coder", "long 40000")
	next := e.ask(alice, "coder", "echo next")
	r := e.waitState(huge.ID, requests.Failed)
	if !strings.Contains(r.Reason, "could not be stored") || !strings.Contains(r.Reason, "too large") {
		t.Errorf("reason %q; want the outcome not stored, too large", r.Reason)
	}
	t.Logf("reason: %s", r.Reason)
	if r := e.waitState(next.ID, requests.Done); r.Result != "next" {
		t.Errorf("next request: result %q", r.Result)
	}
	if n := strings.Count(strings.Join(e.logLines(), "\n"), "turn "+huge.ID.String()); n != 1 {
		t.Errorf("%s ran %d turns, want 1", huge.ID, n)
	}
	if e.hasAudit(huge.ID, "interrupted", "") {
		t.Errorf("a false interrupted record:\n%s", e.auditText(huge.ID))
	}
}

// TestStoreOutageAtTurnEnd (item 3): etcd goes away while a turn runs; the
// turn ends during the outage. Its end is retried until etcd is back: the
// request ends done (not failed with the store's error), its turn ran
// once, and no interrupted/resume pair is recorded.
func TestStoreOutageAtTurnEnd(t *testing.T) {
	srv := etcdtest.Start(t)
	e := newEnvOn(t, srv.Client(t), 0)
	var logBuf syncbuf.Buffer
	e.slog = slog.New(slog.NewTextHandler(&logBuf, nil))
	ended := make(chan struct{}, 1)
	e.start(func(s *agents.Scheduler) {
		s.OnTurn = func(string, string, time.Duration) { ended <- struct{}{} }
	}, agents.Agent{Name: "coder", Runtime: e.exec()})
	gate := filepath.Join(t.TempDir(), "gate")
	r := e.ask(alice, "coder", "await "+gate+"; echo done")
	// Once the agent's session is recorded, the turn's end is the only
	// write left: etcd goes away before it.
	e.waitFor(r.ID, "a session", func(r *requests.Request) bool { return r.Session != "" })
	srv.Stop()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended: // the agent's turn is over; its end is being written
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not end within 30s")
	}
	waitText(t, &logBuf, "store unavailable; retrying the write")
	srv.Restart()
	got := e.waitState(r.ID, requests.Done)
	if got.Result != "done" {
		t.Errorf("result %q, want done", got.Result)
	}
	if n := strings.Count(strings.Join(e.logLines(), "\n"), "turn "+r.ID.String()); n != 1 {
		t.Errorf("%s ran %d turns, want 1", r.ID, n)
	}
	if e.hasAudit(r.ID, "interrupted", "") || e.hasAudit(r.ID, "fail", "") {
		t.Errorf("audit:\n%s", e.auditText(r.ID))
	}
}

// waitText waits (up to 30 s) until buf holds text.
func waitText(t *testing.T, buf *syncbuf.Buffer, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 30s in:\n%s", text, buf.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a log for a line
	}
}
