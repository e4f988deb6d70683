package delegation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/internal/bgcmd"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Task states. Running is the only open one.
const (
	TaskRunning     = "running"
	TaskSucceeded   = "succeeded"
	TaskFailed      = "failed"
	TaskStopped     = "stopped"
	TaskInterrupted = "interrupted"
)

// DefaultMaxTasks is the per-agent cap of concurrent background tasks when
// none is configured.
const DefaultMaxTasks = 3

// Buckets of tasks.
const (
	// bucketTasks: <owner>/<task id> → Task.
	bucketTasks = "delegation_tasks"
	// bucketTasksOpen indexes running tasks:
	// a/<owner>/<agent>/<task id> (the cap), r/<owner>/<request key>/<task id>
	// (a request's tasks) and, for agent runs, q/<owner>/<run request key>
	// → task id (the task its request's end ends).
	bucketTasksOpen = "delegation_tasks_open"
	// bucketTasksListed indexes the tasks a room's listing shows (running,
	// or failed or interrupted and not dismissed): <owner>/<task id>.
	bucketTasksListed = "delegation_tasks_listed"
)

// topicTasks is notified when a task ends in the store.
const topicTasks = "delegation:tasks"

// task reads task id of owner.
func (s *Service) task(owner, id string) (*Task, error) {
	var t Task
	err := s.svc.Store().View(context.Background(), func(tx store.Tx) error {
		return store.GetJSON(tx, bucketTasks, owner+"/"+id, &t)
	})
	return &t, err
}

// Task is background work started by a request's agent: a command, or an
// agent run (a request of another agent, delegated by the starting one).
type Task struct {
	ID      string      `json:"id"`
	Owner   string      `json:"owner"`
	Request requests.ID `json:"request"`
	// Agent is the agent of Request: the one whose cap the task counts in.
	Agent   string   `json:"agent"`
	Name    string   `json:"name"`
	Command []string `json:"command,omitempty"`
	// RunAgent, Text and Run: an agent run's agent, ask and request (Run
	// ends, the task ends).
	RunAgent string      `json:"run_agent,omitempty"`
	Text     string      `json:"text,omitempty"`
	Run      requests.ID `json:"run,omitzero"`
	State    string      `json:"state"`
	Reason   string      `json:"reason,omitempty"`
	Output   string      `json:"output,omitempty"`
	Started  time.Time   `json:"started"`
	Ended    time.Time   `json:"ended,omitzero"`
	// DismissedBy cleared a failed or interrupted task from its room's
	// listing, at Dismissed.
	DismissedBy string    `json:"dismissed_by,omitempty"`
	Dismissed   time.Time `json:"dismissed,omitzero"`
}

// Listed reports whether a room's task listing shows t: it runs, or it
// failed or was interrupted and nobody dismissed it yet.
func (t *Task) Listed() bool {
	switch t.State {
	case TaskRunning:
		return true
	case TaskFailed, TaskInterrupted:
		return t.Dismissed.IsZero()
	}
	return false
}

// Line is how t reads in its request's thread, its result and the room's
// listing: "task T-3 (tests) failed: exit status 1", "task T-4 (review ·
// reviewer R20261129-09) stopped — incomplete: stopped by api:token".
func (t *Task) Line() string {
	name := t.Name
	if !t.Run.IsZero() {
		name += " · " + t.RunAgent + " " + t.Run.String()
	}
	line := fmt.Sprintf("task %s (%s) %s", t.ID, name, t.State)
	if t.State == TaskStopped || t.State == TaskInterrupted {
		line += " — incomplete"
	}
	if t.Reason != "" {
		line += ": " + t.Reason
	}
	return line
}

// What is what t runs, on one line: its command, or its agent run.
func (t *Task) What() string {
	if !t.Run.IsZero() {
		return t.RunAgent + " " + t.Run.String() + ": " + t.Text
	}
	return strings.Join(t.Command, " ")
}

// tasks is the in-memory side of running tasks: their processes.
type tasks struct {
	mu    sync.Mutex
	procs map[string]*bgcmd.Cmd // from its start until its end is committed
	// remote are the tasks running elsewhere (Service.Remote) that this
	// bridge watches for a stop: task key (owner/id) → agent.
	remote map[string]string
	wg     sync.WaitGroup
	// starting is held (read) by BackgroundRun from before it inserts a
	// task until the task's process is in procs (or its failed start is
	// recorded), and (write) by Recover: a task being started here is
	// never taken for one whose process did not survive a restart.
	starting sync.RWMutex
}

func (t *Task) agentKey() string { return "a/" + t.Owner + "/" + t.Agent + "/" + t.ID }

// openEntry is an entry of the open index by agent (Task.agentKey).
type openEntry struct{ owner, agent, id string }

// scanOpenTx calls fn for each running task's entry in the open index by
// agent; fn may return store.ErrStop.
func scanOpenTx(tx store.Tx, fn func(openEntry) error) error {
	return tx.Scan(bucketTasksOpen, "a/", store.PrefixEnd("a/"), func(k string, _ []byte) error {
		rest := k[len("a/"):]
		owner, rest, _ := strings.Cut(rest, "/")
		i := strings.LastIndex(rest, "/")
		if i < 0 {
			return nil
		}
		return fn(openEntry{owner: owner, agent: rest[:i], id: rest[i+1:]})
	})
}

// openTasksTx reads the running tasks whose entry keep accepts (nil: all).
func openTasksTx(tx store.Tx, keep func(openEntry) bool) ([]Task, error) {
	var ts []Task
	err := scanOpenTx(tx, func(e openEntry) error {
		if keep != nil && !keep(e) {
			return nil
		}
		var t Task
		if err := store.GetJSON(tx, bucketTasks, TaskKey(e.owner, e.id), &t); err != nil {
			return err
		}
		ts = append(ts, t)
		return nil
	})
	return ts, err
}
func (t *Task) reqKey() string { return "r/" + t.Owner + "/" + t.Request.Key() + "/" + t.ID }

// runKey is the open index of an agent run by its request.
func runKey(owner string, run requests.ID) string { return "q/" + owner + "/" + run.Key() }

// BackgroundRun records a task for request from and starts it, detached
// from the turn: a command runs in the background; an agent run is a new
// request of run.Agent (delegated by from, approved) in that agent's queue,
// whose end ends the task. The agent's cap is checked in the transaction
// that inserts the task: over it, the call is refused. The same call
// repeated by a resumed turn (run.Key, see agents.CallKey) gets the task of
// the first, and nothing starts (audited as call_replayed); the first
// call's answer is recorded in the transaction that inserts the task.
func (s *Service) BackgroundRun(ctx context.Context, from requests.ID, run agents.BackgroundRun) (string, error) {
	switch {
	case run.Agent != "" && len(run.Command) > 0:
		return "", s.refuse(ctx, from, "background_run", "give a command or an agent to run, not both")
	case run.Agent == "" && len(run.Command) == 0:
		return "", s.refuse(ctx, from, "background_run", "no command given (nor an agent to run)")
	}
	var t *Task
	var refusal, replayed string
	s.tasks.starting.RLock()
	defer s.tasks.starting.RUnlock()
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		var err error
		t, refusal, replayed, err = s.insertTaskTx(tx, from, run)
		return err
	})
	if err == nil && refusal != "" {
		err = s.refuse(ctx, from, "background_run", refusal)
	}
	if err != nil {
		return "", fmt.Errorf("delegation: background_run: %w", err)
	}
	if replayed != "" {
		return replayed, nil
	}
	if t.Run.IsZero() {
		s.start(t)
	}
	return t.ID, nil
}

// insertTaskTx inserts the task of request from's background_run call and
// records the call's answer. It returns the task, or why the call is
// refused, or the task of the same call made before (replayed).
func (s *Service) insertTaskTx(tx store.Tx, from requests.ID, run agents.BackgroundRun) (t *Task, refusal, replayed string, err error) {
	r, err := s.svc.GetTx(tx, from)
	if err != nil {
		return nil, "", "", err
	}
	if first, ok, err := agents.ReplayCallTx(tx, s.svc, r, run.Key); err != nil || ok {
		if replayed = first.TaskID; err == nil && replayed == "" {
			err = fmt.Errorf("the journaled call %s has no task", run.Key)
		}
		return nil, "", replayed, err
	}
	if refusal, err = s.taskRefusalTx(tx, r, run); err != nil || refusal != "" {
		return nil, refusal, "", err
	}
	now := s.svc.Clock().Now().UTC()
	if t, err = s.newTaskTx(tx, r, run, now); err != nil {
		return nil, "", "", err
	}
	return t, "", "", s.recordTaskTx(tx, r, t, run.Key, now)
}

// taskRefusalTx says why r may not start run ("": it may): r is not
// running, the agent to run may not be asked, or r's agent already runs
// as many tasks as its cap allows.
func (s *Service) taskRefusalTx(tx store.Tx, r *requests.Request, run agents.BackgroundRun) (string, error) {
	if r.State != requests.Running {
		return fmt.Sprintf("%s is %s, not running", r.ID, r.State), nil
	}
	if run.Agent != "" {
		if refusal := s.checkAsk(tx, r, run.Agent, run.Text); refusal != "" {
			return refusal, nil
		}
	}
	limit := s.maxTasks(r.Agent)
	p := "a/" + r.Owner + "/" + r.Agent + "/"
	n := 0
	if err := tx.Scan(bucketTasksOpen, p, store.PrefixEnd(p), func(string, []byte) error { n++; return nil }); err != nil {
		return "", err
	}
	if n >= limit {
		return fmt.Sprintf("%s already runs %d background tasks (max_background_tasks is %d); wait for one to end", r.Agent, n, limit), nil
	}
	return "", nil
}

// newTaskTx numbers a new task of r for run, started at now; an agent run
// creates its request (delegated by r, approved).
func (s *Service) newTaskTx(tx store.Tx, r *requests.Request, run agents.BackgroundRun, now time.Time) (*Task, error) {
	seq, err := store.NextSeq(tx, "task_id/"+r.Owner)
	if err != nil {
		return nil, err
	}
	t := &Task{ID: fmt.Sprintf("T-%d", seq), Owner: r.Owner, Request: r.ID, Agent: r.Agent,
		Command: run.Command, State: TaskRunning, Started: now}
	if run.Agent != "" {
		rt, err := s.svc.CreateTx(tx, requests.Ask{Agent: run.Agent, Room: r.Room, Surface: r.Surface,
			User: r.Requester, Text: run.Text, DelegatedBy: r.ID, Approved: true})
		if err != nil {
			return nil, err
		}
		t.Name, t.RunAgent, t.Text, t.Run = firstNonEmpty(run.Name, run.Agent), run.Agent, run.Text, rt.ID
	} else {
		t.Name = firstNonEmpty(run.Name, run.Command[0])
	}
	return t, nil
}

// recordTaskTx writes task t of r, the answer of the call key, the audit
// record and the notice in r's thread.
func (s *Service) recordTaskTx(tx store.Tx, r *requests.Request, t *Task, key agents.CallKey, now time.Time) error {
	if err := s.putTask(tx, t); err != nil {
		return err
	}
	if err := agents.RecordCallTx(tx, key, agents.Response{OK: true, TaskID: t.ID}); err != nil {
		return err
	}
	if err := audit.Append(tx, audit.Record{Time: now, RequestID: r.ID.String(), Actor: "agent:" + r.Agent,
		Action: "background_run", From: r.State.String(), To: r.State.String(),
		Detail: t.ID + " " + t.Name + ": " + clip.Text(t.What(), 200, clip.Bytes)}); err != nil {
		return err
	}
	return s.noticeTx(tx, r.ID, fmt.Sprintf("started background task %s (%s): %s", t.ID, t.Name, clip.Text(t.What(), 200, clip.Bytes)))
}

// refuse audits a refused call and returns its error.
func (s *Service) refuse(ctx context.Context, from requests.ID, call, why string) error {
	err := fmt.Errorf("%w: %s", ErrRefused, why)
	s.auditRefusal(ctx, from, fmt.Errorf("%s: %w", call, err))
	return err
}

func (s *Service) maxTasks(agent string) int {
	if n, ok := s.caps[agent]; ok && n > 0 {
		return n
	}
	return DefaultMaxTasks
}

// putTask writes t, keeps the indexes in step with its state, and
// refreshes the status of whoever waits on t's request through a
// rendezvous ("waiting on R-08 (reviewer) · task T-3 running").
func (s *Service) putTask(tx store.Tx, t *Task) error {
	if err := store.PutJSON(tx, bucketTasks, t.Owner+"/"+t.ID, t); err != nil {
		return err
	}
	open := map[string][]byte{t.agentKey(): nil, t.reqKey(): nil}
	if !t.Run.IsZero() {
		open[runKey(t.Owner, t.Run)] = []byte(t.ID)
	}
	for k, v := range open {
		var err error
		if t.State == TaskRunning {
			err = tx.Put(bucketTasksOpen, k, v)
		} else {
			err = tx.Delete(bucketTasksOpen, k)
		}
		if err != nil {
			return err
		}
	}
	var err error
	if t.Listed() {
		err = tx.Put(bucketTasksListed, t.Owner+"/"+t.ID, nil)
	} else {
		err = tx.Delete(bucketTasksListed, t.Owner+"/"+t.ID)
	}
	if err != nil {
		return err
	}
	var rv Rendezvous
	switch err := store.GetJSON(tx, bucketRendezvous, t.Owner+"/"+t.Request.Key(), &rv); {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case rv.IsOpen():
		return s.refreshWaitingTx(tx, rv.From)
	}
	return nil
}

// start runs t's command in the background (on the agent's runner when
// it has one, remote.go); its end is recorded by finish.
func (s *Service) start(t *Task) {
	if s.Remote != nil && s.Remote.Hosts(t.Agent) {
		s.startRemote(t)
		return
	}
	cmd, err := bgcmd.Start(s.workdir, t.Command)
	if err != nil {
		s.finish(t, TaskFailed, "it did not start: "+err.Error(), "")
		return
	}
	s.tasks.mu.Lock()
	s.tasks.procs[t.ID] = cmd
	s.tasks.mu.Unlock()
	// Subscribed before the process can end: a stop committed from now on
	// is seen.
	wake, unsub := s.svc.Store().Subscribe(topicTasks)
	exited := make(chan struct{})
	s.tasks.wg.Add(2)
	go func() {
		// A task ended in the store while its process runs (stopped, or
		// interrupted on another node) is killed once that commit is
		// visible, never before: an aborted transaction kills nothing.
		defer s.tasks.wg.Done()
		defer unsub()
		for {
			select {
			case <-exited:
				return
			case <-wake:
			}
			if tk, err := s.task(t.Owner, t.ID); err == nil && tk.State != TaskRunning {
				cmd.Kill()
				return
			}
		}
	}()
	go func() {
		defer s.tasks.wg.Done()
		out, err := cmd.Wait()
		close(exited)
		state, reason := TaskSucceeded, ""
		if err != nil {
			state, reason = TaskFailed, err.Error()
		}
		s.finish(t, state, reason, out)
		// Ours until its end is committed: Recover in between would
		// record it interrupted instead.
		s.tasks.mu.Lock()
		delete(s.tasks.procs, t.ID)
		s.tasks.mu.Unlock()
	}()
}

// finish records the end of task t (once: a task no longer running is left
// as it is) and delivers its result to the request that started it.
func (s *Service) finish(t *Task, state, reason, output string) {
	ctx := context.Background()
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		_, err := s.EndTaskTx(tx, t.Owner, t.ID, state, reason, output)
		return err
	})
	if err != nil {
		s.log.ErrorContext(ctx, "recording a task's end", "task_id", t.ID, "request_id", t.Request.String(), "error", err)
	}
}

// EndTaskTx ends running task id of owner with state (compare-and-set:
// a task already ended is left as it is, and false returned) and delivers
// its result to the starting request's next turn, with a line in its
// thread. A result for a request that has ended is recorded in its audit
// and thread notice, not dropped. An agent run whose task ends before its
// request (stopped) has its request cancelled.
func (s *Service) EndTaskTx(tx store.Tx, owner, id, state, reason, output string) (bool, error) {
	var t Task
	if err := store.GetJSON(tx, bucketTasks, owner+"/"+id, &t); err != nil {
		return false, err
	}
	if t.State != TaskRunning {
		return false, nil
	}
	t.State, t.Reason, t.Output, t.Ended = state, s.svc.Clip(reason), s.svc.Clip(output), s.svc.Clock().Now().UTC()
	if err := s.putTask(tx, &t); err != nil {
		return false, err
	}
	tx.Notify(topicTasks)
	failpoint.AtCommit(tx, failpoint.TaskEnded)
	if !t.Run.IsZero() {
		rt, err := s.svc.GetTx(tx, t.Run)
		if err != nil {
			return false, err
		}
		if !rt.State.Terminal() {
			if err := s.cancelTx(tx, rt, fmt.Sprintf("cancelled: its background task %s ended %s (%s)", t.ID, state, reason)); err != nil {
				return false, err
			}
		}
	}
	text := t.Line()
	if t.Output != "" {
		text += "\noutput:\n" + t.Output
	}
	if err := audit.Append(tx, audit.Record{Time: t.Ended, RequestID: t.Request.String(), Actor: actor,
		Action: "task_" + state, Detail: t.ID + " " + t.Name + " " + reason}); err != nil {
		return false, err
	}
	err := agents.DeliverTx(tx, s.svc, t.Request, agents.Input{Kind: agents.InputTaskResult, TaskID: t.ID, State: state,
		RequestID: t.Run.String(), Text: text})
	if errors.Is(err, agents.ErrEnded) {
		return true, s.undeliveredTx(tx, t.Request, "the result of task "+t.ID, text)
	}
	if err != nil {
		return false, err
	}
	if err := s.noticeTx(tx, t.Request, clip.Text(text, 500, clip.Bytes)); err != nil {
		return false, err
	}
	return true, nil
}

// endRunTx ends the task whose agent run ended request rt is, if any: done
// → succeeded with the answer as output; failed → failed with the reason;
// cancelled or expired → stopped (incomplete), with what was done so far.
func (s *Service) endRunTx(tx store.Tx, rt *requests.Request) error {
	id, err := tx.Get(bucketTasksOpen, runKey(rt.Owner, rt.ID))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	state, reason := TaskSucceeded, ""
	switch rt.State {
	case requests.Failed:
		state, reason = TaskFailed, firstNonEmpty(rt.Reason, "failed")
	case requests.Cancelled, requests.Expired:
		state, reason = TaskStopped, firstNonEmpty(rt.Reason, rt.State.String())
	}
	_, err = s.EndTaskTx(tx, rt.Owner, string(id), state, reason, rt.Result)
	return err
}

// openTasksTx counts request r's running tasks.
func (s *Service) openTasksTx(tx store.Tx, r *requests.Request) (int, error) {
	ids, err := taskIDsTx(tx, r.Owner, r.ID)
	return len(ids), err
}

// taskIDsTx lists the running tasks of request id of owner.
func taskIDsTx(tx store.Tx, owner string, id requests.ID) ([]string, error) {
	var ids []string
	p := "r/" + owner + "/" + id.Key() + "/"
	err := tx.Scan(bucketTasksOpen, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		ids = append(ids, k[len(p):])
		return nil
	})
	return ids, err
}

// stopTasksTx ends request r's running tasks as stopped; their processes
// are killed once the transaction commits (see start).
func (s *Service) stopTasksTx(tx store.Tx, r *requests.Request) error {
	ids, err := taskIDsTx(tx, r.Owner, r.ID)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := s.EndTaskTx(tx, r.Owner, id, TaskStopped, "its request was cancelled", ""); err != nil {
			return err
		}
	}
	return nil
}

// Recover ends as interrupted the command tasks recorded running whose
// process is not this process's (the bridge restarted): the request that
// started each is told so. An agent run goes on: its request resumes with
// its session like any request (one that ended ends its task now). Call it
// at the start of each leader term, before the scheduler runs; it is safe
// while calls start tasks (see tasks.starting).
func (s *Service) Recover(ctx context.Context) error {
	s.tasks.starting.Lock()
	defer s.tasks.starting.Unlock()
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		ts, err := openTasksTx(tx, nil)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if !t.Run.IsZero() {
				rt, err := s.svc.GetTx(tx, t.Run)
				if err != nil {
					return err
				}
				if rt.State.Terminal() {
					if err := s.endRunTx(tx, rt); err != nil {
						return err
					}
				}
				continue
			}
			s.tasks.mu.Lock()
			mine := s.tasks.procs[t.ID] != nil
			s.tasks.mu.Unlock()
			if mine || s.Remote != nil && s.Remote.Hosts(t.Agent) {
				continue // a runner's task ends when its runner reports (remote.go)
			}
			if _, err := s.EndTaskTx(tx, t.Owner, t.ID, TaskInterrupted, "the bridge restarted and its process did not survive", ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delegation: recover tasks: %w", err)
	}
	return nil
}
