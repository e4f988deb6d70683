package delegation_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store/bolt"
	"github.com/roombridge/roombridge/threads"
)

// lives runs the core as a bridge does, and again after a restart: each
// life builds requests, threads, approvals, delegation and a scheduler
// (coder and reviewer, the demo agent) afresh over the same bolt store, as
// a restarted bridge does, and recovers the tasks before its scheduler
// runs. A life ends when its scheduler's context ends: a running turn is
// cut there (its agent killed), and its request stays running.
type lives struct {
	*env
	appr *approvals.Service
	// stop ends the current life; ended lists what each ended life's
	// delegation service must wait for (its task processes) at cleanup.
	stop  func()
	ended []*delegation.Service
}

func newLives(t *testing.T) *lives {
	t.Helper()
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &lives{env: &env{t: t, ctx: ctx, db: db, log: filepath.Join(dir, "demo.log")}}
	t.Cleanup(func() {
		cancel()
		l.end()
		for _, d := range l.ended {
			d.Wait()
		}
		_ = db.Close()
	})
	return l
}

// start begins a life whose coder runs on coder (nil: the demo agent).
func (l *lives) start(coder agents.Runtime) {
	t := l.t
	t.Helper()
	rs := []config.Room{{Name: "main", Console: true, Agents: []string{"coder", "reviewer"}}}
	svc := requests.NewService(l.db, clock.Real{}, "acme", []string{alice})
	roomDir := directory.New(rs, []string{alice}, chat.Console)
	th := threads.New(roomDir)
	th.SetRequests(svc)
	svc.Observe(th.Observe)
	appr := approvals.New(approvals.Options{Requests: svc, Rooms: roomDir, TTL: time.Hour, Threads: th})
	svc.Observe(appr.Observe)
	del := delegation.New(delegation.Options{Requests: svc, Agents: []string{"coder", "reviewer"}, Workdir: t.TempDir(), Threads: th})
	svc.Observe(del.Observe)
	if err := del.Recover(l.ctx); err != nil {
		t.Fatal(err)
	}
	l.svc, l.del, l.appr, l.router = svc, del, appr, rooms.New(svc, appr, roomDir, del, nil)
	if coder == nil {
		coder = l.demo()
	}
	s := agents.NewScheduler(svc, th, nil, agents.Agent{Name: "coder", Runtime: coder}, agents.Agent{Name: "reviewer", Runtime: l.demo()})
	s.Approver, s.Delegator = appr, del
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	l.stop = func() {
		cancel()
		<-done
		l.ended = append(l.ended, del)
	}
}

// end ends the current life, if any.
func (l *lives) end() {
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
}

// restart ends the current life and starts the next, with the demo agent
// as coder.
func (l *lives) restart() {
	l.end()
	l.start(nil)
}

func (l *lives) demo() *agents.Exec {
	return &agents.Exec{Command: []string{os.Args[0]}, Env: []string{helperEnv + "=demo",
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"), "DEMO_AGENT_LOG=" + l.log},
		Grace: 2 * time.Second, Workdir: l.t.TempDir()}
}

// cutAfter runs an agent whose turn is cut, as by a crash, right after its
// first call of type call was carried out: the call has committed, its
// answer never reaches the agent, and the turn hangs until its life ends.
type cutAfter struct {
	agents.Runtime
	call string
	done chan struct{} // closed once the call was carried out
	once sync.Once
}

func newCutAfter(rt agents.Runtime, call string) *cutAfter {
	return &cutAfter{Runtime: rt, call: call, done: make(chan struct{})}
}

func (c *cutAfter) Run(ctx context.Context, t agents.Turn, sink agents.Sink) (agents.Outcome, error) {
	return c.Runtime.Run(ctx, t, &cutSink{Sink: sink, c: c})
}

type cutSink struct {
	agents.Sink
	c *cutAfter
}

func (k *cutSink) Call(ctx context.Context, ev agents.Event) agents.Response {
	resp := k.Sink.Call(ctx, ev)
	if ev.Type == k.c.call {
		k.c.once.Do(func() { close(k.c.done) })
		<-ctx.Done()
	}
	return resp
}

// waitCut waits until c's call was carried out.
func (l *lives) waitCut(c *cutAfter) {
	l.t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		l.t.Fatalf("no %s within 30s; audit:\n%s", c.call, l.allAudit())
	}
}

// logCount counts the lines of the demo log that are line (after the
// timestamp).
func (l *lives) logCount(line string) int {
	data, _ := os.ReadFile(l.log)
	n := 0
	for _, s := range strings.Split(string(data), "\n") {
		if _, rest, _ := strings.Cut(s, " "); rest == line {
			n++
		}
	}
	return n
}

// auditCount counts request id's audit records of action whose detail has
// detail.
func (l *lives) auditCount(id requests.ID, action, detail string) int {
	l.t.Helper()
	recs, err := audit.List(l.ctx, l.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Action == action && strings.Contains(r.Detail, detail) {
			n++
		}
	}
	return n
}

// delegatedBy lists the requests delegated by ra.
func (l *lives) delegatedBy(ra requests.ID) []*requests.Request {
	l.t.Helper()
	all, err := l.svc.List(l.ctx, requests.Filter{})
	if err != nil {
		l.t.Fatal(err)
	}
	var out []*requests.Request
	for _, r := range all {
		if r.DelegatedBy == ra {
			out = append(out, r)
		}
	}
	return out
}

// TestResumedAskAgentOnce: A's turn is cut right after its ask_agent
// committed (RB and the rendezvous exist; A never heard). The next life
// resumes the turn; the demo agent, which keeps no memory, asks again with
// the same call id: it gets RB again (audited as a replay), no second
// request is made, and A gets B's answer once, at its next turn. Whether B
// answers after A's resumed turn asked again, or before the restart (the
// answer waits in A's inbox: the resumed turn, which repeats the cut one,
// does not get it, its next turn does).
func TestResumedAskAgentOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before bool // B answers before the restart
	}{{"answered after the resume", false}, {"answered before the restart", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLives(t)
			gate := filepath.Join(t.TempDir(), "gate")
			t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
			if tc.before {
				if err := os.WriteFile(gate, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cut := newCutAfter(l.demo(), agents.EventAskAgent)
			l.start(cut)
			ra := l.ask("coder", "ask reviewer await "+gate+"|echo looks good")
			l.waitCut(cut)
			rbs := l.delegatedBy(ra.ID)
			if len(rbs) != 1 {
				t.Fatalf("%d delegated requests after the ask", len(rbs))
			}
			rb := rbs[0].ID
			if tc.before {
				l.waitState(rb, requests.Done)
			}
			l.restart()
			resumed := "response " + ra.ID.String() + " c1 ok=true " + rb.String()
			l.waitFor("the resumed turn answered RB", func() bool { return l.logHas(resumed) })
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			got := l.waitState(ra.ID, requests.Done)
			if want := "got answer " + rb.String() + ": looks good"; got.Result != want {
				t.Errorf("RA result %q, want %q", got.Result, want)
			}
			if rbs := l.delegatedBy(ra.ID); len(rbs) != 1 {
				t.Errorf("%d delegated requests, want 1", len(rbs))
			}
			if rv := l.rendezvous(rb); rv.State != delegation.Answered || rv.From != ra.ID {
				t.Errorf("rendezvous %+v", rv)
			}
			if n := l.auditCount(ra.ID, "ask_agent", ""); n != 1 {
				t.Errorf("%d ask_agent records, want 1:\n%s", n, l.allAudit())
			}
			if n := l.auditCount(ra.ID, "call_replayed", "ask_agent c1 of turn 1, repeated by the resumed turn: answered as the first time ("+rb.String()+")"); n != 1 {
				t.Errorf("%d replays audited, want 1:\n%s", n, l.allAudit())
			}
			if n := l.auditCount(ra.ID, "resume", ""); n != 1 {
				t.Errorf("%d resumes, want 1", n)
			}
			if n := l.logCount("input " + ra.ID.String() + " answer " + rb.String() + ": looks good"); n != 1 {
				t.Errorf("A got B's answer %d times, want once", n)
			}
		})
	}
}

// TestResumedBackgroundRunOnce: A's turn is cut right after its
// background_run committed. The resumed turn starts the same task again
// (same call id): it gets the first task's ID, and no second task starts.
// The first task's process did not survive the restart: it ends
// interrupted, and A is told so once, at its next turn.
func TestResumedBackgroundRunOnce(t *testing.T) {
	l := newLives(t)
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	cut := newCutAfter(l.demo(), agents.EventBackgroundRun)
	l.start(cut)
	ra := l.ask("coder", "background tests sh "+script(t, gate, "green")+"; yield on tests")
	l.waitCut(cut)
	l.restart()
	got := l.waitState(ra.ID, requests.Done)
	if want := "got task_result T-1: task T-1 (tests) interrupted — incomplete: the bridge restarted"; !strings.HasPrefix(got.Result, want) {
		t.Errorf("RA result %q, want it to begin %q", got.Result, want)
	}
	ts, err := l.del.Tasks(l.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].ID != "T-1" {
		t.Errorf("tasks %+v, want T-1 only", ts)
	}
	if !l.logHas("response " + ra.ID.String() + " c1 ok=true T-1") {
		t.Error("the resumed turn was not answered T-1")
	}
	if n := l.auditCount(ra.ID, "background_run", ""); n != 1 {
		t.Errorf("%d background_run records, want 1:\n%s", n, l.allAudit())
	}
	if n := l.auditCount(ra.ID, "call_replayed", "background_run c1 of turn 1, repeated by the resumed turn: answered as the first time (T-1)"); n != 1 {
		t.Errorf("%d replays audited, want 1:\n%s", n, l.allAudit())
	}
	if n := l.logCount("input " + ra.ID.String() + " task_result T-1: " + ts[0].Line()); n != 1 {
		t.Errorf("A got the task's result %d times, want once", n)
	}
}

// TestResumedAskOfPeopleOnce: a request_approval (or ask_user) decided
// before the turn was cut is not asked again by the resumed turn: the
// repeated call gets the decision (or answer) taken, and no second card
// opens.
func TestResumedAskOfPeopleOnce(t *testing.T) {
	for _, tc := range []struct {
		call, ask, audited, resp string
		decide                   func(l *lives, id string) error
	}{
		{agents.EventRequestApproval, "approve deploy to prod; echo deployed", "approval_requested",
			"c1 ok=true approved by " + alice, func(l *lives, id string) error {
				_, err := l.router.Decide(l.ctx, id+".1", true, alice, chat.Console)
				return err
			}},
		{agents.EventAskUser, "question which region?", "question_asked",
			"c1 ok=true eu-west", func(l *lives, id string) error {
				_, err := l.appr.Answer(l.ctx, id+".q1", "eu-west", alice, chat.Console)
				return err
			}},
	} {
		t.Run(tc.call, func(t *testing.T) {
			l := newLives(t)
			cut := newCutAfter(l.demo(), tc.call)
			l.start(cut)
			ra := l.ask("coder", tc.ask)
			l.waitFor("the ask open", func() bool { return l.auditCount(ra.ID, tc.audited, "") > 0 })
			if err := tc.decide(l, ra.ID.String()); err != nil {
				t.Fatal(err)
			}
			l.waitCut(cut)
			l.restart()
			l.waitState(ra.ID, requests.Done)
			if !l.logHas("response " + ra.ID.String() + " " + tc.resp) {
				t.Errorf("the resumed turn was not answered %q; audit:\n%s", tc.resp, l.allAudit())
			}
			if n := l.auditCount(ra.ID, tc.audited, ""); n != 1 {
				t.Errorf("%d %s records, want 1:\n%s", n, tc.audited, l.allAudit())
			}
			if n := l.auditCount(ra.ID, "call_replayed", tc.call+" c1 of turn 1"); n != 1 {
				t.Errorf("%d replays audited, want 1:\n%s", n, l.allAudit())
			}
		})
	}
}

// TestResumedTurnEndsBeforeLateResult: a resumed turn gets the input of the
// turn it repeats, not a task result that came after that turn began (as a
// turn no restart cut would not): when it gives its final answer, that
// result is recorded as undelivered (audit and thread), not dropped.
func TestResumedTurnEndsBeforeLateResult(t *testing.T) {
	l := newLives(t)
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	quick := filepath.Join(t.TempDir(), "quick.sh")
	if err := os.WriteFile(quick, []byte("echo quick-done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cut := newCutAfter(l.demo(), agents.EventBackgroundRun)
	l.start(cut)
	ra := l.ask("coder", "background quick sh "+quick+"; await "+gate+"; echo finished")
	l.waitCut(cut)
	l.waitFor("the task's result queued", func() bool { return l.auditCount(ra.ID, "task_succeeded", "T-1") == 1 })
	l.restart()
	l.waitFor("the resumed turn answered T-1", func() bool { return l.logHas("response " + ra.ID.String() + " c1 ok=true T-1") })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := l.waitState(ra.ID, requests.Done); got.Result != "finished" {
		t.Errorf("RA result %q", got.Result)
	}
	if n := l.logCount("input " + ra.ID.String() + " task_result T-1: task T-1 (quick) succeeded"); n != 0 {
		t.Errorf("the resumed turn got the late result %d times", n)
	}
	if n := l.auditCount(ra.ID, "undelivered", "task_result arrived after the last turn: task T-1 (quick) succeeded"); n != 1 {
		t.Errorf("%d undelivered records, want 1:\n%s", n, l.allAudit())
	}
	if ts, err := l.del.Tasks(l.ctx, "acme"); err != nil || len(ts) != 1 {
		t.Errorf("tasks %+v %v, want T-1 only", ts, err)
	}
}
