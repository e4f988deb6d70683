package runners

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// TaskHost is what the hub needs of background tasks (package delegation):
// where a runner's commands end is recorded, and what a reconnecting
// runner still runs.
type TaskHost interface {
	// EndTask records how task owner/id ended (a task already ended is
	// left as it is), refusing it unless the task's agent is one of
	// agents (those of the runner that reports it).
	EndTask(ctx context.Context, owner, id string, agents []string, state, reason, output string) error
	// ReconcileTasks is told which of agents' tasks runner has (alive, by
	// task key, and known: those and the ones sent to it since); it ends
	// the open ones not known and says which alive ones to stop.
	ReconcileTasks(ctx context.Context, runner string, agents, alive []string, known func(key string) bool) (stop []string, err error)
}

// Hosts reports whether agent is hosted by a runner: its background
// commands run there (delegation.Remote).
func (h *Hub) Hosts(agent string) bool { return h.o.Hosts[agent] != "" }

// agentConn is the connection of agent's runner (nil: away); a task key
// given is recorded as sent on it.
func (h *Hub) agentConn(agent, task string) (runner string, c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	runner = h.o.Hosts[agent]
	if x := h.host[runner]; x != nil {
		c = x.c
	}
	if c != nil && task != "" {
		c.tasks[task] = true
	}
	return runner, c
}

// StartTask sends task owner/id's command to agent's runner
// (delegation.Remote); its end comes back as a task_end frame.
func (h *Hub) StartTask(_ context.Context, agent, owner, id string, command []string) error {
	runner, c := h.agentConn(agent, owner+"/"+id)
	if c == nil {
		return fmt.Errorf("runner %s is away", runner)
	}
	if err := c.send(Frame{Type: FrameTask, Job: &Job{Key: owner + "/" + id, Agent: agent, Command: command}}); err != nil {
		return fmt.Errorf("runner %s: send task %s: %w", runner, id, err)
	}
	h.o.Log.Info("runner: background task sent", "runner", runner, "agent", agent, "task_id", id)
	return nil
}

// StopTask tells agent's runner to stop task owner/id; a runner away is
// told when it reconnects (ReconcileTasks).
func (h *Hub) StopTask(agent, owner, id string) {
	if _, c := h.agentConn(agent, ""); c != nil {
		_ = c.send(Frame{Type: FrameTaskStop, Job: &Job{Key: owner + "/" + id}})
	}
}

// taskEnd records a runner's task_end and acknowledges it once recorded.
func (h *Hub) taskEnd(ctx context.Context, runner string, c *conn, j *Job) {
	owner, id, ok := strings.Cut(j.Key, "/")
	if h.o.Tasks == nil || !ok {
		return
	}
	h.mu.Lock()
	var agents []string
	if x := h.host[runner]; x != nil {
		agents = x.cfg // a runner may end only its own agents' tasks
	}
	h.mu.Unlock()
	if err := h.o.Tasks.EndTask(ctx, owner, id, agents, j.State, j.Reason, j.Output); err != nil {
		h.o.Log.Warn("runner: recording a task's end", "runner", runner, "task_id", id, "error", err)
		return
	}
	_ = c.send(Frame{Type: FrameTaskAck, Job: &Job{Key: j.Key}})
}

// reconcileTasks settles the tasks of a runner that just connected.
func (h *Hub) reconcileTasks(ctx context.Context, hello Frame, c *conn) {
	if h.o.Tasks == nil {
		return
	}
	known := func(key string) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return c.tasks[key] || slices.Contains(hello.Tasks, key)
	}
	stop, err := h.o.Tasks.ReconcileTasks(ctx, hello.Runner, hello.Agents, hello.Tasks, known)
	if err != nil {
		h.o.Log.Warn("runner: settling its background tasks", "runner", hello.Runner, "error", err)
	}
	for _, k := range stop {
		_ = c.send(Frame{Type: FrameTaskStop, Job: &Job{Key: k}})
	}
}
