package delegation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/store"
)

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

// Errors of the task commands.
var (
	// ErrNoTask: there is no task with that ID.
	ErrNoTask = errors.New("no such task")
	// ErrTaskEnded: the task has already ended (it cannot be stopped).
	ErrTaskEnded = errors.New("the task has already ended")
	// ErrTaskRunning: the task runs (it cannot be dismissed).
	ErrTaskRunning = errors.New("the task is running")
)

// Running lists the tasks of the requests of room ("": of every room)
// that its listing shows, in the order they were started: the running
// ones, and those that failed or were interrupted and are not dismissed.
func (s *Service) Running(ctx context.Context, room string) ([]Task, error) {
	var out []Task
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		out = nil
		return tx.Scan(bucketTasksListed, "", "", func(k string, _ []byte) error {
			var t Task
			if err := store.GetJSON(tx, bucketTasks, k, &t); err != nil {
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
		return nil, fmt.Errorf("delegation: room tasks: %w", err)
	}
	slices.SortFunc(out, func(a, b Task) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// StopTask stops running task id on behalf of actor (surface: where it
// came from): it ends as stopped (its request is told the work is
// incomplete); its process is killed once that commits, or its agent run's
// request is cancelled. An unknown or ended task is refused, with an audit
// record and no change.
func (s *Service) StopTask(ctx context.Context, id, actor, surface string) (*Task, error) {
	return s.taskCommand(ctx, id, actor, surface, "task_stop", func(tx store.Tx, t *Task) error {
		if t.State != TaskRunning {
			return refused{fmt.Errorf("%w: %s is %s", ErrTaskEnded, t.ID, t.State)}
		}
		_, err := s.EndTaskTx(tx, t.Owner, t.ID, TaskStopped, "stopped by "+actor, "")
		return err
	})
}

// DismissTask clears ended task id from its room's listing on behalf of
// actor (surface: where it came from), with an audit record and a line in
// the starting request's thread. A running task is refused (stop it
// first), as is an unknown one; a task dismissed already is left as it is.
func (s *Service) DismissTask(ctx context.Context, id, actor, surface string) (*Task, error) {
	return s.taskCommand(ctx, id, actor, surface, "task_dismiss", func(tx store.Tx, t *Task) error {
		switch {
		case t.State == TaskRunning:
			return refused{fmt.Errorf("%w: %s is running; stop it first (bridge tasks stop %s)", ErrTaskRunning, t.ID, t.ID)}
		case !t.Dismissed.IsZero():
			return nil
		}
		t.DismissedBy, t.Dismissed = actor, s.svc.Clock().Now().UTC()
		if err := s.putTask(tx, t); err != nil {
			return err
		}
		return s.noticeTx(tx, t.Request, fmt.Sprintf("%s — dismissed by %s", t.Line(), actor))
	})
}

// refused wraps the refusal of a task command.
type refused struct{ error }

// taskCommand runs a person's command on task id in one transaction: do
// returns a refusal (refused: no change; audited as action+"_refused" after
// the transaction) or an error. A change is audited as action, in its
// transaction. An unknown task is refused with ErrNoTask.
func (s *Service) taskCommand(ctx context.Context, id, actor, surface, action string,
	do func(tx store.Tx, t *Task) error) (*Task, error) {
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
		before := t
		var r refused
		if err := do(tx, &t); errors.As(err, &r) {
			refusal = r.error
			return nil
		} else if err != nil {
			return err
		}
		if err := store.GetJSON(tx, bucketTasks, t.Owner+"/"+t.ID, &t); err != nil {
			return err
		}
		if t.State == before.State && t.Dismissed.Equal(before.Dismissed) {
			return nil // nothing changed: nothing to audit
		}
		return audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: t.Request.String(),
			Actor: actor, Surface: surface, Action: action, From: before.State, To: t.State, Detail: t.ID + " " + t.Name})
	})
	if err == nil && refusal != nil {
		err = refusal
		if aerr := s.svc.Store().Update(ctx, func(tx store.Tx) error {
			return audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: t.Request.String(),
				Actor: actor, Surface: surface, Action: action + "_refused", Detail: refusal.Error()})
		}); aerr != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "auditing a refused task command", "task_id", id, "action", action, "error", aerr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("delegation: %s %s: %w", strings.TrimPrefix(action, "task_"), id, err)
	}
	return &t, nil
}

// findTaskTx reads task id of any owner into t: a running one through the
// open index, an ended one by a scan of the tasks.
func findTaskTx(tx store.Tx, id string, t *Task) (bool, error) {
	key := ""
	err := scanOpenTx(tx, func(e openEntry) error {
		if e.id == id {
			key = TaskKey(e.owner, id)
			return store.ErrStop
		}
		return nil
	})
	if err == nil && key == "" {
		err = tx.Scan(bucketTasks, "", "", func(k string, _ []byte) error {
			if strings.HasSuffix(k, "/"+id) {
				key = k
				return store.ErrStop
			}
			return nil
		})
	}
	if err != nil {
		return false, err
	}
	if key == "" {
		return false, nil
	}
	return true, store.GetJSON(tx, bucketTasks, key, t)
}
