package runners

import (
	"maps"
	"slices"

	"github.com/roombridge/roombridge/internal/bgcmd"
)

// job is a background command running on the runner; its end is kept
// until the bridge acknowledges it, and resent on each reconnect.
type job struct {
	key     string
	cmd     *bgcmd.Cmd
	stopped bool
	// quit: killed as the runner stopped; not reported (the bridge ends it
	// interrupted when the runner is back without it).
	quit bool
	end  *Frame
}

// jobKeys are the background commands the runner knows (hello).
func (r *Runner) jobKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.jobs))
}

// handleJob acts on the bridge's task, task_stop and task_ack frames.
func (r *Runner) handleJob(f Frame) {
	if f.Job == nil {
		return
	}
	r.mu.Lock()
	j := r.jobs[f.Job.Key]
	switch {
	case f.Type == FrameTask && j == nil:
		j = &job{key: f.Job.Key}
		r.jobs[j.key] = j
		r.mu.Unlock()
		r.startJob(j, f.Job)
		return
	case f.Type == FrameTaskStop && j != nil && j.end == nil && j.cmd != nil:
		j.stopped = true
		j.cmd.Kill()
	case f.Type == FrameTaskAck && j != nil && j.end != nil:
		delete(r.jobs, j.key)
	}
	r.mu.Unlock()
}

// startJob runs the command in its agent's workdir and reports its end.
func (r *Runner) startJob(j *job, spec *Job) {
	if _, ok := r.o.Agents[spec.Agent]; !ok || len(spec.Command) == 0 {
		r.endJob(j, "failed", "it did not start: runner "+r.o.Name+" does not host agent "+spec.Agent, "")
		return
	}
	cmd, err := bgcmd.Start(r.o.Workdirs[spec.Agent], spec.Command)
	if err != nil {
		r.endJob(j, "failed", "it did not start: "+err.Error(), "")
		return
	}
	r.mu.Lock()
	j.cmd = cmd
	r.mu.Unlock()
	r.o.Log.Info("runner: background task started", "task", j.key, "agent", spec.Agent)
	go func() {
		out, err := cmd.Wait()
		r.mu.Lock()
		stopped, quit := j.stopped, j.quit
		r.mu.Unlock()
		switch {
		case quit:
			r.o.Log.Info("runner: background task killed as the runner stops", "task", j.key)
		case stopped:
			r.endJob(j, "stopped", "stopped by the bridge", out)
		case err != nil:
			r.endJob(j, "failed", err.Error(), out)
		default:
			r.endJob(j, "succeeded", "", out)
		}
	}()
}

// endJob keeps j's end and sends it when connected.
func (r *Runner) endJob(j *job, state, reason, output string) {
	f := Frame{Type: FrameTaskEnd, Job: &Job{Key: j.key, State: state, Reason: reason, Output: output}}
	r.mu.Lock()
	j.end = &f
	c := r.cur
	r.mu.Unlock()
	r.o.Log.Info("runner: background task ended", "task", j.key, "state", state)
	if c != nil {
		_ = c.send(f)
	}
}

// resendJobEnds sends on c the ends the bridge has not acknowledged.
func (r *Runner) resendJobEnds(c *rconn) {
	r.mu.Lock()
	var ends []Frame
	for _, k := range slices.Sorted(maps.Keys(r.jobs)) {
		if e := r.jobs[k].end; e != nil {
			ends = append(ends, *e)
		}
	}
	r.mu.Unlock()
	for _, f := range ends {
		if c.send(f) != nil {
			return
		}
	}
}

// stopJobs kills the commands still running (the runner stops).
func (r *Runner) stopJobs() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		if j.cmd != nil && j.end == nil {
			j.quit = true
			j.cmd.Kill()
		}
	}
}

// Tasks is how many background commands the runner knows: running, or
// ended and not yet acknowledged by the bridge.
func (r *Runner) Tasks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}
