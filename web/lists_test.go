package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/web"
)

// TestSweepExpiredSignIns: retention's sweep deletes the sign-in links
// never used and the sessions never ended once they expire, and nothing
// before.
func TestSweepExpiredSignIns(t *testing.T) {
	h := newHarness(t)
	cookie := signIn(t, h.signInLink(owner))
	h.signInLink(member) // never used
	count := func() map[string]int {
		n := map[string]int{}
		if err := h.bridge.DB.View(context.Background(), func(tx store.Tx) error {
			for _, b := range []string{"web_links", "web_sessions", "web_user_sessions"} {
				n[b] = 0
				if err := tx.Scan(b, "", "", func(string, []byte) error { n[b]++; return nil }); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n["web_links"] != 1 || n["web_sessions"] != 1 || n["web_user_sessions"] != 1 {
		t.Fatalf("stored sign-ins %v, want one link, one session", n)
	}
	w := h.bridge.Web()
	if n, err := w.Sweep(context.Background(), time.Now()); err != nil || n != 0 {
		t.Fatalf("sweep now: %d, %v; want nothing deleted", n, err)
	}
	if code, _, _ := get(t, h.bridge.URL, "/rooms/backend", cookie); code != http.StatusOK {
		t.Fatalf("the session after a sweep: %d, want 200", code)
	}
	if n, err := w.Sweep(context.Background(), time.Now().Add(web.SessionTTL+time.Minute)); err != nil || n != 2 {
		t.Fatalf("sweep past the session's expiry: %d, %v; want the link and the session deleted", n, err)
	}
	if n := count(); n["web_links"] != 0 || n["web_sessions"] != 0 || n["web_user_sessions"] != 0 {
		t.Fatalf("stored sign-ins after the sweep %v, want none", n)
	}
}

// TestTasksPage: the Tasks page lists the room's background tasks, running
// and ended, with their outcome.
func TestTasksPage(t *testing.T) {
	h := newHarness(t)
	cookie := signIn(t, h.signInLink(owner))
	h.mention(owner, "background tests sleep 60; yield")
	del := h.bridge.Delegation()
	var running []delegation.Task
	h.waitStore("a running task", func() bool {
		running, _ = del.Running(context.Background(), "backend")
		return len(running) == 1 && running[0].State == delegation.TaskRunning
	})
	page := func() string {
		code, body, _ := get(t, h.bridge.URL, "/tasks?room=backend", cookie)
		if code != http.StatusOK {
			t.Fatalf("GET /tasks: %d", code)
		}
		return body
	}
	if body := page(); !strings.Contains(body, running[0].ID+" tests") || !strings.Contains(body, "(tests) running") {
		t.Fatalf("the Tasks page does not list the running task:\n%s", body)
	}
	if _, err := del.StopTask(context.Background(), running[0].ID, "slack:"+owner, "slack"); err != nil {
		t.Fatal(err)
	}
	h.waitStore("the task stopped", func() bool { return strings.Contains(page(), "(tests) stopped — incomplete") })
	if _, body, _ := get(t, h.bridge.URL, "/tasks?room=elsewhere", cookie); strings.Contains(body, running[0].ID+" tests") {
		t.Errorf("the Tasks page of another room lists backend's task")
	}
}
