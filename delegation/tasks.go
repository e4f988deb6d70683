package delegation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
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

// maxOutput bounds the output a task keeps (its tail).
const maxOutput = 16 << 10

// Buckets of tasks.
const (
	// bucketTasks: <owner>/<task id> → Task.
	bucketTasks = "delegation_tasks"
	// bucketTasksOpen indexes running tasks twice:
	// a/<owner>/<agent>/<task id> (the cap) and r/<owner>/<request key>/<task id>.
	bucketTasksOpen = "delegation_tasks_open"
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

// Task is a background command started by a request's agent.
type Task struct {
	ID      string      `json:"id"`
	Owner   string      `json:"owner"`
	Request requests.ID `json:"request"`
	Agent   string      `json:"agent"`
	Name    string      `json:"name"`
	Command []string    `json:"command"`
	State   string      `json:"state"`
	Reason  string      `json:"reason,omitempty"`
	Output  string      `json:"output,omitempty"`
	Started time.Time   `json:"started"`
	Ended   time.Time   `json:"ended,omitzero"`
}

// tasks is the in-memory side of running tasks: their processes.
type tasks struct {
	mu    sync.Mutex
	procs map[string]*exec.Cmd
	wg    sync.WaitGroup
}

func (t *Task) agentKey() string { return "a/" + t.Owner + "/" + t.Agent + "/" + t.ID }
func (t *Task) reqKey() string   { return "r/" + t.Owner + "/" + t.Request.Key() + "/" + t.ID }

// BackgroundRun records a task for request from and starts its command,
// detached from the turn. The agent's cap is checked in the transaction
// that inserts the task: over it, the call is refused.
func (s *Service) BackgroundRun(ctx context.Context, from requests.ID, run agents.BackgroundRun) (string, error) {
	if run.Agent != "" {
		return "", s.refuse(ctx, from, "background_run", "a background agent run is not supported yet; use ask_agent")
	}
	if len(run.Command) == 0 {
		return "", s.refuse(ctx, from, "background_run", "no command given")
	}
	var t *Task
	var refusal string
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		t, refusal = nil, ""
		r, err := s.svc.GetTx(tx, from)
		if err != nil {
			return err
		}
		if r.State != requests.Running {
			refusal = fmt.Sprintf("%s is %s, not running", r.ID, r.State)
			return nil
		}
		limit := s.maxTasks(r.Agent)
		p := "a/" + r.Owner + "/" + r.Agent + "/"
		n := 0
		if err := tx.Scan(bucketTasksOpen, p, store.PrefixEnd(p), func(string, []byte) error { n++; return nil }); err != nil {
			return err
		}
		if n >= limit {
			refusal = fmt.Sprintf("%s already runs %d background tasks (max_background_tasks is %d); wait for one to end", r.Agent, n, limit)
			return nil
		}
		seq, err := store.NextSeq(tx, "task_id/"+r.Owner)
		if err != nil {
			return err
		}
		now := s.svc.Clock().Now().UTC()
		t = &Task{ID: fmt.Sprintf("T-%d", seq), Owner: r.Owner, Request: r.ID, Agent: r.Agent,
			Name: firstNonEmpty(run.Name, run.Command[0]), Command: run.Command, State: TaskRunning, Started: now}
		if err := s.putTask(tx, t); err != nil {
			return err
		}
		if err := audit.Append(tx, audit.Record{Time: now, RequestID: r.ID.String(), Actor: "agent:" + r.Agent,
			Action: "background_run", From: r.State.String(), To: r.State.String(),
			Detail: t.ID + " " + t.Name + ": " + trim(strings.Join(t.Command, " "), 200)}); err != nil {
			return err
		}
		return s.noticeTx(tx, r.ID, fmt.Sprintf("started background task %s (%s): %s", t.ID, t.Name, trim(strings.Join(t.Command, " "), 200)))
	})
	if err == nil && refusal != "" {
		err = s.refuse(ctx, from, "background_run", refusal)
	}
	if err != nil {
		return "", fmt.Errorf("delegation: background_run: %w", err)
	}
	s.start(t)
	return t.ID, nil
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

// putTask writes t and keeps the open index in step with its state.
func (s *Service) putTask(tx store.Tx, t *Task) error {
	if err := store.PutJSON(tx, bucketTasks, t.Owner+"/"+t.ID, t); err != nil {
		return err
	}
	for _, k := range []string{t.agentKey(), t.reqKey()} {
		var err error
		if t.State == TaskRunning {
			err = tx.Put(bucketTasksOpen, k, nil)
		} else {
			err = tx.Delete(bucketTasksOpen, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// start runs t's command in the background; its end is recorded by finish.
func (s *Service) start(t *Task) {
	var out tail
	cmd := exec.Command(t.Command[0], t.Command[1:]...)
	cmd.Dir = s.workdir
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
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
				killGroup(cmd.Process)
				return
			}
		}
	}()
	go func() {
		defer s.tasks.wg.Done()
		err := cmd.Wait()
		close(exited)
		s.tasks.mu.Lock()
		delete(s.tasks.procs, t.ID)
		s.tasks.mu.Unlock()
		state, reason := TaskSucceeded, ""
		if err != nil {
			state, reason = TaskFailed, err.Error()
		}
		s.finish(t, state, reason, out.String())
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
	failpoint.Hit(failpoint.TaskEnded)
	if err != nil {
		s.log.ErrorContext(ctx, "recording a task's end", "task", t.ID, "request_id", t.Request.String(), "error", err)
	}
}

// EndTaskTx ends running task id of owner with state (compare-and-set:
// a task already ended is left as it is, and false returned) and delivers
// its result to the starting request's next turn. A result for a request
// that has ended is recorded in its audit and thread notice, not dropped.
func (s *Service) EndTaskTx(tx store.Tx, owner, id, state, reason, output string) (bool, error) {
	var t Task
	if err := store.GetJSON(tx, bucketTasks, owner+"/"+id, &t); err != nil {
		return false, err
	}
	if t.State != TaskRunning {
		return false, nil
	}
	t.State, t.Reason, t.Output, t.Ended = state, reason, output, s.svc.Clock().Now().UTC()
	if err := s.putTask(tx, &t); err != nil {
		return false, err
	}
	tx.Notify(topicTasks)
	text := fmt.Sprintf("task %s (%s) %s", t.ID, t.Name, state)
	switch state {
	case TaskStopped:
		text += " before it finished: the work is incomplete"
	case TaskInterrupted:
		text += ": the bridge restarted and its process did not survive"
	}
	if reason != "" {
		text += ": " + reason
	}
	if output != "" {
		text += "\noutput:\n" + output
	}
	if err := audit.Append(tx, audit.Record{Time: t.Ended, RequestID: t.Request.String(), Actor: actor,
		Action: "task_" + state, Detail: t.ID + " " + t.Name + " " + reason}); err != nil {
		return false, err
	}
	err := agents.DeliverTx(tx, s.svc, t.Request, agents.Input{Kind: agents.InputTaskResult, TaskID: t.ID, State: state, Text: text})
	if errors.Is(err, agents.ErrEnded) {
		return true, s.undeliveredTx(tx, t.Request, "the result of task "+t.ID, text)
	}
	if err != nil {
		return false, err
	}
	if err := s.noticeTx(tx, t.Request, trim(text, 500)); err != nil {
		return false, err
	}
	return true, nil
}

// openTasksTx counts request r's running tasks.
func (s *Service) openTasksTx(tx store.Tx, r *requests.Request) (int, error) {
	ids, err := s.taskIDsTx(tx, r)
	return len(ids), err
}

func (s *Service) taskIDsTx(tx store.Tx, r *requests.Request) ([]string, error) {
	var ids []string
	p := "r/" + r.Owner + "/" + r.ID.Key() + "/"
	err := tx.Scan(bucketTasksOpen, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		ids = append(ids, k[len(p):])
		return nil
	})
	return ids, err
}

// stopTasksTx ends request r's running tasks as stopped; their processes
// are killed once the transaction commits (see start).
func (s *Service) stopTasksTx(tx store.Tx, r *requests.Request) error {
	ids, err := s.taskIDsTx(tx, r)
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

// Recover ends as interrupted the tasks recorded running whose process is
// not this process's (the bridge restarted): the request that started each
// is told so. Call it once at start, before the scheduler runs.
func (s *Service) Recover(ctx context.Context) error {
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		var ends [][2]string
		err := tx.Scan(bucketTasksOpen, "a/", store.PrefixEnd("a/"), func(k string, _ []byte) error {
			rest := strings.TrimPrefix(k, "a/")
			owner, _, _ := strings.Cut(rest, "/")
			ends = append(ends, [2]string{owner, rest[strings.LastIndex(rest, "/")+1:]})
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range ends {
			s.tasks.mu.Lock()
			mine := s.tasks.procs[e[1]] != nil
			s.tasks.mu.Unlock()
			if mine {
				continue
			}
			if _, err := s.EndTaskTx(tx, e[0], e[1], TaskInterrupted, "", ""); err != nil {
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

// Tasks lists the tasks of owner, in the order they were started.
func (s *Service) Tasks(ctx context.Context, owner string) ([]Task, error) {
	var out []Task
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		out = nil
		p := owner + "/"
		return tx.Scan(bucketTasks, p, store.PrefixEnd(p), func(k string, v []byte) error {
			var t Task
			if err := store.GetJSON(tx, bucketTasks, k, &t); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	return out, err
}

// Wait waits for the running tasks' processes to end (tests, shutdown).
func (s *Service) Wait() { s.tasks.wg.Wait() }

// tail keeps the last maxOutput bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - maxOutput; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// ErrNoTask: there is no task with that ID.
var ErrNoTask = errors.New("no such task")

// ErrTaskEnded: the task has already ended.
var ErrTaskEnded = errors.New("the task has already ended")

// Running lists the running tasks of the requests of room ("": of every
// room), in the order they were started.
func (s *Service) Running(ctx context.Context, room string) ([]Task, error) {
	var out []Task
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		out = nil
		return tx.Scan(bucketTasksOpen, "a/", store.PrefixEnd("a/"), func(k string, _ []byte) error {
			rest := strings.TrimPrefix(k, "a/")
			owner, _, _ := strings.Cut(rest, "/")
			var t Task
			if err := store.GetJSON(tx, bucketTasks, owner+"/"+rest[strings.LastIndex(rest, "/")+1:], &t); err != nil {
				return err
			}
			if room != "" {
				r, err := s.svc.GetTx(tx, t.Request)
				if err != nil {
					return err
				}
				if r.Room != room {
					return nil
				}
			}
			out = append(out, t)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("delegation: running tasks: %w", err)
	}
	slices.SortFunc(out, func(a, b Task) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// RunningText is Running as lines for a chat room's "tasks" command.
func (s *Service) RunningText(ctx context.Context, room string) (string, error) {
	ts, err := s.Running(ctx, room)
	if err != nil {
		return "", err
	}
	if len(ts) == 0 {
		return "no background tasks running", nil
	}
	lines := []string{fmt.Sprintf("%d background task(s) running:", len(ts))}
	for _, t := range ts {
		lines = append(lines, fmt.Sprintf("%s %s (%s for %s, since %s): %s", t.ID, t.Name, t.Agent, t.Request,
			t.Started.Format(time.TimeOnly), trim(strings.Join(t.Command, " "), 80)))
	}
	return strings.Join(lines, "\n"), nil
}

// StopTask stops running task id on behalf of actor (surface: where it
// came from): it ends as stopped (its request is told the work is
// incomplete) and its process is killed once that commits. An unknown or
// ended task is refused, with an audit record and no change.
func (s *Service) StopTask(ctx context.Context, id, actor, surface string) (*Task, error) {
	var t Task
	var refusal error
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		refusal = nil
		found, err := findTaskTx(tx, id, &t)
		if err != nil {
			return err
		}
		if !found {
			refusal = fmt.Errorf("%w: %q", ErrNoTask, id)
			return nil
		}
		owner := t.Owner
		if t.State != TaskRunning {
			refusal = fmt.Errorf("%w: %s is %s", ErrTaskEnded, t.ID, t.State)
			return nil
		}
		if _, err := s.EndTaskTx(tx, owner, id, TaskStopped, "stopped by "+actor, ""); err != nil {
			return err
		}
		if err := audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: t.Request.String(),
			Actor: actor, Surface: surface, Action: "task_stop", Detail: t.ID + " " + t.Name}); err != nil {
			return err
		}
		return store.GetJSON(tx, bucketTasks, owner+"/"+id, &t)
	})
	if err == nil && refusal != nil {
		err = refusal
		if aerr := s.svc.Store().Update(ctx, func(tx store.Tx) error {
			return audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: t.Request.String(),
				Actor: actor, Surface: surface, Action: "task_stop_refused", Detail: refusal.Error()})
		}); aerr != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "auditing a refused stop", "task", id, "error", aerr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("delegation: stop task %s: %w", id, err)
	}
	return &t, nil
}

// findTaskTx reads task id of any owner into t: a running one through the
// open index, an ended one by a scan of the tasks.
func findTaskTx(tx store.Tx, id string, t *Task) (bool, error) {
	key := ""
	find := func(k string, _ []byte) error {
		if strings.HasSuffix(k, "/"+id) {
			key = k
			return store.ErrStop
		}
		return nil
	}
	if err := tx.Scan(bucketTasksOpen, "a/", store.PrefixEnd("a/"), find); err != nil {
		return false, err
	}
	if key != "" {
		rest := strings.TrimPrefix(key, "a/")
		owner, _, _ := strings.Cut(rest, "/")
		key = owner + "/" + id
	} else if err := tx.Scan(bucketTasks, "", "", find); err != nil {
		return false, err
	}
	if key == "" {
		return false, nil
	}
	return true, store.GetJSON(tx, bucketTasks, key, t)
}
