package core

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/threads"
)

// stopping is a graceful stop (shutdown.grace), shared by the daemon and
// the leader's work. The daemon begins it at the first signal: from then on
// the HTTP API refuses new work (POSTs answer 503, except the agent tools at
// /mcp) and, if this instance leads, its leader work stops intake (the
// connectors and the sweeper), lets running agent turns reach a safe point,
// flushes the outbox, and leaves. All of it within the grace period: turns
// still running at its end are interrupted (resumed by the next start) and
// the flush gives up. The daemon then ends the term, which resigns (HA: a
// follower leads within milliseconds) or, single node, closes the store and
// its file lock.
type stopping struct {
	grace time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	begun    bool
	deadline time.Time
	work     sync.WaitGroup // leader work that has not drained yet

	started chan struct{} // closed by begin
	expired chan struct{} // closed at the deadline
}

func newStopping(grace time.Duration, log *slog.Logger) *stopping {
	return &stopping{grace: grace, log: log, started: make(chan struct{}), expired: make(chan struct{})}
}

// begin starts the stop (once); the grace period starts now.
func (s *stopping) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.begun {
		return
	}
	s.begun, s.deadline = true, time.Now().Add(s.grace)
	close(s.started)
	time.AfterFunc(s.grace, func() { close(s.expired) })
}

// stopped reports whether the stop has begun.
func (s *stopping) stopped() bool {
	select {
	case <-s.started:
		return true
	default:
		return false
	}
}

// drained is closed once no leader work is left to drain (at once on a
// follower).
func (s *stopping) drained() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		s.work.Wait()
		close(ch)
	}()
	return ch
}

// leaderWork is what the leader does while it leads: the scheduler, the
// outbox, and intake (the connectors, the sweeper, retention).
type leaderWork struct {
	sched    *agents.Scheduler
	runSched func(context.Context) error // sched.Run, after recovery
	deliver  *threads.Deliverer
	hold     bool // deliver nothing (Options.HoldOutbox)
	intake   []job
}

// lead runs w for one term (ctx), until the term ends; in a graceful stop,
// it drains w and then waits for the daemon to end the term. A term that
// starts after the stop began runs nothing.
func (s *stopping) lead(ctx context.Context, w leaderWork) error {
	s.mu.Lock()
	if s.begun {
		s.mu.Unlock()
		<-ctx.Done()
		return nil
	}
	s.work.Add(1)
	s.mu.Unlock()
	err := runJobs(ctx, s.jobs(w))
	s.work.Done()
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// jobs are w's jobs, each told how to stop gracefully.
func (s *stopping) jobs(w leaderWork) []job {
	schedDone := make(chan struct{})
	jobs := []job{
		{"scheduler", func(ctx context.Context) error {
			defer close(schedDone)
			ctx, interrupt := context.WithCancel(ctx)
			defer interrupt()
			go func() {
				select {
				case <-s.started:
					w.sched.Drain() // turns stop at their next safe point...
				case <-ctx.Done():
					return
				}
				select {
				case <-s.expired:
					interrupt() // ...or when the grace period is over
				case <-ctx.Done():
				}
			}()
			return w.runSched(ctx)
		}},
		{"outbox", func(ctx context.Context) error {
			if w.hold {
				return nil
			}
			// Deliver as usual until the scheduler has stopped, then flush
			// what it left, by the deadline.
			if err := until(schedDone, w.deliver.Run)(ctx); err != nil || ctx.Err() != nil || !s.stopped() {
				return err
			}
			fctx, cancel := context.WithDeadline(ctx, s.deadline)
			defer cancel()
			if err := w.deliver.Flush(fctx); err != nil {
				s.log.WarnContext(ctx, "shutdown: the outbox was not flushed in time; the next leader delivers the rest", "error", err)
				return nil
			}
			s.log.InfoContext(ctx, "shutdown: outbox flushed")
			return nil
		}},
	}
	for _, j := range w.intake {
		jobs = append(jobs, job{j.name, until(s.started, j.run)})
	}
	return jobs
}

// until runs fn with a context that also ends when stop is closed; fn's
// error after that is the stop's doing, not a failure.
func until(stop <-chan struct{}, fn func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
}

// refusedDuringStop is the answer to new work once the stop has begun.
const refusedDuringStop = "shutting down: this bridge takes no new work; try again shortly (in HA mode another instance takes over at once)"

// gate refuses new work once the stop has begun: every POST but the agent
// tools' (/mcp, used by turns still running) answers 503. Platform webhooks
// are refused too: Slack and Feishu deliver the event again later, to
// whichever instance then leads.
func (s *stopping) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && s.stopped() && r.URL.Path != "/mcp" && !strings.HasPrefix(r.URL.Path, "/mcp/") {
			s.log.InfoContext(r.Context(), "shutdown: refused new work", "method", r.Method, "path", r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": refusedDuringStop})
			return
		}
		h.ServeHTTP(w, r)
	})
}
