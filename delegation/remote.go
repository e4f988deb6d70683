package delegation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/store"
)

// Remote runs the background commands of agents hosted elsewhere (a
// runner: docs/design.md §6). Their tasks live in this store like any;
// the command runs there and its end comes back through EndTask.
type Remote interface {
	// Hosts reports whether agent's commands run elsewhere.
	Hosts(agent string) bool
	// StartTask starts task owner/id's command where agent is hosted; an
	// error: it did not start (the runner is away).
	StartTask(ctx context.Context, agent, owner, id string, command []string) error
	// StopTask stops task owner/id's command (a task no longer running in
	// the store); where it is not running, nothing.
	StopTask(agent, owner, id string)
}

// TaskKey is how a task is named to a Remote and by it: owner/id.
func TaskKey(owner, id string) string { return owner + "/" + id }

// ErrNotYourTask: a runner reported the end of a task it does not host.
var ErrNotYourTask = errors.New("not this runner's task")

// startRemote starts t's command through s.Remote; a stop is carried to it
// by WatchRemote.
func (s *Service) startRemote(t *Task) {
	s.tasks.mu.Lock()
	s.tasks.remote[TaskKey(t.Owner, t.ID)] = t.Agent
	s.tasks.mu.Unlock()
	if err := s.Remote.StartTask(context.Background(), t.Agent, t.Owner, t.ID, t.Command); err != nil {
		s.finish(t, TaskFailed, "it did not start: "+err.Error(), "")
	}
}

// EndTask records how remote task owner/id ended (a task already ended is
// left as it is): the same end as a local command's. The runner that
// reports it hosts agents: the end of another agent's task (another
// runner's, or one running on the bridge) is refused and changes nothing.
func (s *Service) EndTask(ctx context.Context, owner, id string, agents []string, state, reason, output string) error {
	switch state {
	case TaskSucceeded, TaskFailed, TaskStopped:
	default:
		return fmt.Errorf("delegation: end task %s: unknown state %q", id, state)
	}
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		var t Task
		if err := store.GetJSON(tx, bucketTasks, TaskKey(owner, id), &t); err != nil {
			return err
		}
		if !slices.Contains(agents, t.Agent) {
			return fmt.Errorf("%w: its agent %s is not hosted by the runner that reported it (agents %v)", ErrNotYourTask, t.Agent, agents)
		}
		_, err := s.EndTaskTx(tx, owner, id, state, reason, output)
		return err
	})
	if err != nil {
		return fmt.Errorf("delegation: end task %s: %w", id, err)
	}
	return nil
}

// ReconcileTasks is told, when a runner hosting agents connects, which of
// their tasks it has (known: the tasks of its hello, and those sent to it
// since; keys), and which of those it has (alive). An open task of those
// agents that the runner does not know ended with it (interrupted); an
// alive one that no longer runs in the store (stopped while the runner was
// away) is returned, to stop. The known ones running are watched for a
// stop. No task is being started meanwhile (as in Recover): one is either
// known or inserted after.
func (s *Service) ReconcileTasks(ctx context.Context, runner string, agents, alive []string, known func(key string) bool) (stop []string, err error) {
	s.tasks.starting.Lock()
	defer s.tasks.starting.Unlock()
	watch := map[string]string{}
	err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
		stop, watch = nil, map[string]string{}
		ts, err := openTasksTx(tx, func(e openEntry) bool { return slices.Contains(agents, e.agent) })
		if err != nil {
			return err
		}
		open := map[string]Task{}
		for _, t := range ts {
			if t.Run.IsZero() {
				open[TaskKey(t.Owner, t.ID)] = t
			}
		}
		for k, t := range open {
			if known(k) {
				watch[k] = t.Agent
				continue
			}
			if _, err := s.EndTaskTx(tx, t.Owner, t.ID, TaskInterrupted, "runner "+runner+" restarted and its process did not survive", ""); err != nil {
				return err
			}
		}
		for _, k := range alive {
			if _, ok := open[k]; !ok {
				stop = append(stop, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delegation: reconcile tasks of runner %s: %w", runner, err)
	}
	s.tasks.mu.Lock()
	maps.Copy(s.tasks.remote, watch)
	s.tasks.mu.Unlock()
	return stop, nil
}

// WatchRemote carries stops to the remote tasks until ctx ends (the
// leader's work): a remote task that no longer runs in the store (stopped,
// its request cancelled) is stopped where it runs.
func (s *Service) WatchRemote(ctx context.Context) error {
	wake, unsub := s.svc.Store().Subscribe(topicTasks)
	defer unsub()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
		s.tasks.mu.Lock()
		watched := maps.Clone(s.tasks.remote)
		s.tasks.mu.Unlock()
		for k, agent := range watched {
			owner, id, _ := strings.Cut(k, "/")
			t, err := s.task(owner, id)
			if err != nil || t.State == TaskRunning {
				continue
			}
			s.tasks.mu.Lock()
			delete(s.tasks.remote, k)
			s.tasks.mu.Unlock()
			if t.State == TaskStopped || t.State == TaskInterrupted {
				s.Remote.StopTask(agent, owner, id)
			}
		}
	}
}
