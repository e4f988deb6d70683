package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store/bolt"
)

// delegationPhase is a phase of a delegation in which the bridge is killed.
type delegationPhase struct {
	name string
	// failpoint, if set, kills the bridge at the phase's narrow window
	// (the test kills it otherwise, once the phase is reached).
	failpoint string
	// bGo: B's turn may pass its await before the kill.
	bGo bool
	// taskGo: B's task may end before the kill.
	taskGo bool
	// At the kill: RB's state, its rendezvous' state and its task's state
	// ("" for none); how many times RA and RB had been woken.
	rb, rv, task   string
	aWoken, bWoken int
	// B's final answer (after the restart) is "got task_result T-1: task
	// T-1 (long) " and then outcome ... detail.
	outcome, detail string
	// B's agent processes in all (e.g. 3: the first turn, cut, resumed,
	// then woken by its task's end).
	bTurns int
	// resumed is the agent whose request the restart resumes ("": none;
	// the others were parked, waiting, and are woken instead).
	resumed string
}

// TestDelegationCrash (issue 7): A asks B; B starts a background task and
// yields; the task's end wakes B, whose final answer wakes A. The bridge is
// SIGKILLed in each phase (B running; B waiting on its task; the task ended
// but B not yet woken; B answered but A not yet woken; and A woken but its
// turn not yet run) and started again on
// the same store: A still gets B's final answer, exactly once, in one
// further turn; no request, task or ID is doubled; the audit shows the
// interruption and the resume, not a copy.
func TestDelegationCrash(t *testing.T) {
	for _, ph := range []delegationPhase{
		{name: "B running", rb: "running", rv: delegation.Open,
			outcome: "succeeded", detail: "long-work-done", bTurns: 3, resumed: "reviewer"},
		{name: "B waiting on its task", bGo: true, rb: "running", rv: delegation.WaitingOnTask, task: delegation.TaskRunning,
			outcome: "interrupted", detail: "the bridge restarted", bTurns: 2},
		{name: "task ended, B not woken", failpoint: failpoint.TaskEnded, bGo: true, taskGo: true,
			rb: "running", rv: delegation.WaitingOnTask, task: delegation.TaskSucceeded,
			outcome: "succeeded", detail: "long-work-done", bTurns: 2},
		{name: "B answered, A not woken", failpoint: failpoint.RequestEnded, bGo: true, taskGo: true,
			rb: "done", rv: delegation.Answered, task: delegation.TaskSucceeded, bWoken: 1,
			outcome: "succeeded", detail: "long-work-done", bTurns: 2},
		// Beyond issue 7's four: A's wake is recorded, its turn not run.
		// The fourth turn start is A's wake (A, B, B's wake, A's wake).
		{name: "A woken, its turn cut", failpoint: failpoint.TurnStarted + "@4", bGo: true, taskGo: true,
			rb: "done", rv: delegation.Answered, task: delegation.TaskSucceeded, aWoken: 1, bWoken: 1,
			outcome: "succeeded", detail: "long-work-done", bTurns: 2, resumed: "coder"},
	} {
		t.Run(strings.ReplaceAll(ph.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			delegationCrash(t, ph)
		})
	}
}

func delegationCrash(t *testing.T, ph delegationPhase) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "bridge.yaml")
	writeFile(t, cfg, testConfig(dir))
	bGate, taskGate := filepath.Join(dir, "b-gate"), filepath.Join(dir, "task-gate")
	open := func(path string) {
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { open(bGate); open(taskGate) }) // nothing left waiting
	long := filepath.Join(dir, "long.sh")
	writeFile(t, long, "while [ ! -e "+taskGate+" ]; do sleep 0.01; done\necho long-work-done\n")
	agentLog := filepath.Join(dir, "agents.log")
	env := []string{"DEMO_AGENT_LOG=" + agentLog}

	first := env
	if ph.failpoint != "" {
		first = append(env[:len(env):len(env)], failpoint.EnvVar+"="+ph.failpoint)
	}
	p := startBridge(t, dir, first, "run", "--config", cfg)
	base, tok := p.api(data)
	p.send("@coder ask reviewer await " + bGate + "| background long sh " + long + "| yield on long")
	ra, rb := delegatedPair(t, p, base, tok)
	p.waitRequest(base, tok, ra, "A waiting on B", func(r *requests.Request) bool {
		return strings.HasPrefix(r.Activity, "waiting")
	})
	if ph.bGo {
		open(bGate)
		p.waitRequest(base, tok, rb, "B waiting on its task", func(r *requests.Request) bool {
			return strings.HasPrefix(r.Activity, "waiting")
		})
	} else {
		p.waitRequest(base, tok, rb, "B's turn running", func(r *requests.Request) bool {
			return r.State == requests.Running && r.Session != ""
		})
	}
	if ph.taskGo {
		open(taskGate) // the failpoint kills the bridge
	} else {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the bridge ended with %v, not killed in phase %q:\n%s", p.cmd.ProcessState, ph.name, p.Stderr())
	}
	if fp, _, _ := strings.Cut(ph.failpoint, "@"); fp != "" && !strings.Contains(p.Stderr(), "failpoint "+fp+"@") {
		t.Fatalf("the bridge died, but not at failpoint %s:\n%s", ph.failpoint, p.Stderr())
	}

	// The store at the kill is in the phase the test claims.
	st := openStore(t, data)
	if r := st.get(ra); r.State != requests.Running {
		t.Errorf("at the kill, RA is %s", r.State)
	}
	if r := st.get(rb); r.State.String() != ph.rb {
		t.Errorf("at the kill, RB is %s, want %s", r.State, ph.rb)
	}
	if rv := st.rendezvous(rb); rv.State != ph.rv {
		t.Errorf("at the kill, the rendezvous is %s, want %s", rv.State, ph.rv)
	}
	if got := st.taskStates(); ph.task == "" && len(got) != 0 || ph.task != "" && (len(got) != 1 || got["T-1"] != ph.task) {
		t.Errorf("at the kill, tasks %v, want T-1 %q", got, ph.task)
	}
	if n := st.count(ra, "wake"); n != ph.aWoken {
		t.Errorf("at the kill, RA had been woken %d time(s), want %d", n, ph.aWoken)
	}
	if n := st.count(rb, "wake"); n != ph.bWoken {
		t.Errorf("at the kill, RB had been woken %d time(s), want %d", n, ph.bWoken)
	}
	st.close()
	if n := countLog(t, agentLog, "input "+regexp.QuoteMeta(ra.String())); n != 0 {
		t.Fatalf("A got %d answer(s) before the kill", n)
	}

	// Start again on the same store: everything may now go on.
	open(bGate)
	open(taskGate)
	p = startBridge(t, dir, env, "run", "--config", cfg)
	base, tok = p.api(data)
	p.waitRequest(base, tok, ra, "RA done", func(r *requests.Request) bool { return r.State.Terminal() })
	p.waitLine(0, regexp.QuoteMeta(ra.String()+" | final: ")) // in its thread; checked below
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done

	st = openStore(t, data)
	defer st.close()
	all, err := st.svc.List(context.Background(), requests.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != ra || all[1].ID != rb {
		t.Fatalf("requests after the restart: %v, want exactly %s and %s", ids(all), ra, rb)
	}
	a, b := all[0], all[1]
	prefix := "got task_result T-1: task T-1 (long) " + ph.outcome
	if b.State != requests.Done || !strings.HasPrefix(b.Result, prefix) || !strings.Contains(b.Result, ph.detail) {
		t.Errorf("RB %s %q, want done with %q ... %q", b.State, b.Result, prefix, ph.detail)
	}
	if a.State != requests.Done || a.Result != "got answer "+rb.String()+": "+b.Result {
		t.Errorf("RA %s %q, want done with B's answer %q", a.State, a.Result, b.Result)
	}
	if rv := st.rendezvous(rb); rv.State != delegation.Answered {
		t.Errorf("rendezvous %s, want answered", rv.State)
	}
	wantTask := delegation.TaskSucceeded
	if ph.task == delegation.TaskRunning {
		wantTask = delegation.TaskInterrupted
	}
	if got := st.taskStates(); len(got) != 1 || got["T-1"] != wantTask {
		t.Errorf("tasks %v, want only T-1 %s", got, wantTask)
	}

	// A: its first turn, then exactly one more with B's answer (and
	// nothing else), resumed with its session if its turn was cut, woken
	// otherwise. B: resumed with its session if its turn was cut; woken
	// once with its task's result.
	q := regexp.QuoteMeta
	aResumed, bResumed := ph.resumed == "coder", ph.resumed == "reviewer"
	for _, c := range []struct {
		re   string
		want int
	}{
		{"turn " + q(ra.String()) + " ", 2},
		{"turn " + q(ra.String()+` session="`+a.Session+`" resumed=`+strconv.FormatBool(aResumed)+" inputs=1 "), 1},
		{"input " + q(ra.String()) + " ", 1},
		{"input " + q(ra.String()+" answer "+rb.String()+": "+b.Result), 1},
		{"final " + q(ra.String()), 1},
		{"turn " + q(rb.String()) + " ", ph.bTurns},
		{"turn " + q(rb.String()+` session="`+b.Session+`" resumed=true `), boolInt(bResumed)},
		{`turn \S+ .* resumed=true `, boolInt(ph.resumed != "")},
		{"input " + q(rb.String()+" "+strings.TrimPrefix(b.Result, "got ")), 1},
		{"input " + q(rb.String()) + " ", 1},
		{"final " + q(rb.String()), 1},
	} {
		if n := countLog(t, agentLog, c.re); n != c.want {
			t.Errorf("agent log: %d line(s) %q, want %d", n, c.re, c.want)
		}
	}

	// The audit: each trail a clean chain; RB's shows the interruption
	// and the resume when it was cut, and nothing is created twice.
	for _, r := range all {
		count := map[string]int{}
		for _, rec := range auditTrail(t, st.db, r) {
			count[rec.Action]++
		}
		resumed := ph.resumed == r.Agent
		want := map[string]int{"create": 1, "start": 1, "interrupted": boolInt(resumed), "resume": boolInt(resumed), "finish": 1}
		for action, n := range want {
			if count[action] != n {
				t.Errorf("%s: %d audit record(s) %q, want %d: %v", r.ID, count[action], action, n, count)
			}
		}
	}
}

// boolInt is 1 for true.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// delegatedPair waits until A's request and the one it delegated to B
// exist, and returns their IDs.
func delegatedPair(t *testing.T, p *proc, base, tok string) (requests.ID, requests.ID) {
	t.Helper()
	var ra, rb requests.ID
	p.poll("A's request and B's", func() bool {
		var list struct {
			Requests []*requests.Request `json:"requests"`
		}
		if c, err := apiCall(http.MethodGet, base+"/v1/requests", tok, nil, &list); err != nil || c != http.StatusOK {
			return false
		}
		for _, r := range list.Requests {
			if r.Agent == "reviewer" && !r.DelegatedBy.IsZero() {
				ra, rb = r.DelegatedBy, r.ID
				return true
			}
		}
		return false
	})
	return ra, rb
}

// waitRequest waits until request id, read through the API, satisfies ok.
func (p *proc) waitRequest(base, tok string, id requests.ID, what string, ok func(*requests.Request) bool) {
	p.t.Helper()
	p.poll(what, func() bool {
		var r requests.Request
		c, err := apiCall(http.MethodGet, base+"/v1/requests/"+id.String(), tok, nil, &r)
		return err == nil && c == http.StatusOK && ok(&r)
	})
}

// poll checks cond every few milliseconds until it holds (30 s at most,
// and only while the bridge runs).
func (p *proc) poll(what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: not within 30s", what)
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s: the bridge exited first:\n%s", what, p.Stderr())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// countLog counts the entries of the demo agents' log that match re right
// after their time (an entry may span lines: a multi-line input's text).
func countLog(t *testing.T, path, re string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rx := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d\.\d{6} ` + re)
	return len(rx.FindAllIndex(b, -1))
}

func ids(rs []*requests.Request) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID.String())
	}
	return out
}

// offlineStore is the store of a bridge that is not running, read through
// the real services.
type offlineStore struct {
	t   *testing.T
	db  *bolt.DB
	svc *requests.Service
	del *delegation.Service
}

func openStore(t *testing.T, data string) *offlineStore {
	t.Helper()
	db, err := bolt.Open(filepath.Join(data, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	svc := requests.NewService(db, clock.Real{}, "acme", nil)
	return &offlineStore{t: t, db: db, svc: svc, del: delegation.New(delegation.Options{Requests: svc})}
}

func (s *offlineStore) close() { _ = s.db.Close() }

func (s *offlineStore) get(id requests.ID) *requests.Request {
	s.t.Helper()
	r, err := s.svc.Get(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

func (s *offlineStore) rendezvous(rb requests.ID) *delegation.Rendezvous {
	s.t.Helper()
	rv, err := s.del.Get(context.Background(), rb)
	if err != nil {
		s.t.Fatalf("rendezvous of %s: %v", rb, err)
	}
	return rv
}

// count counts request id's audit records of action.
func (s *offlineStore) count(id requests.ID, action string) int {
	s.t.Helper()
	recs, err := audit.List(context.Background(), s.db, audit.Query{RequestID: id.String()}, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if rec.Action == action {
			n++
		}
	}
	return n
}

// taskStates maps the owner's task IDs to their states.
func (s *offlineStore) taskStates() map[string]string {
	s.t.Helper()
	ts, err := s.del.Tasks(context.Background(), "acme")
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for _, tk := range ts {
		if _, dup := out[tk.ID]; dup {
			s.t.Errorf("task ID %s twice", tk.ID)
		}
		out[tk.ID] = tk.State
	}
	return out
}
