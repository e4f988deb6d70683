package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/failpoint"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// actor is how the scheduler appears in the audit log.
const actor = "system:scheduler"

// Back-off after a store error in an agent's worker: doubling from
// minRetry, capped at maxRetry (a store outage must not spin the CPU; a
// recovered store is picked up within maxRetry).
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// Agent is a named runtime the scheduler runs requests on.
type Agent struct {
	Name    string
	Runtime Runtime
}

// Scheduler runs each agent's requests one at a time in ID order, and
// different agents in parallel. Each agent has one worker, woken by store
// notifications of its queue (no polling). On start, a worker first resumes
// its agent's running request with the stored session, then takes approved
// ones in ID order.
type Scheduler struct {
	svc     *requests.Service
	threads *threads.Threads
	agents  []Agent
	log     *slog.Logger

	drain     chan struct{} // closed by Drain
	drainOnce sync.Once

	// Approver answers agents' request_approval calls. Nil: they are
	// answered "not approved: no approver configured".
	Approver Approver
	// Delegator carries out ask_agent and background_run and says what a
	// yield waits on. Nil: those calls are answered "delegation is not
	// available" and a yield fails the request.
	Delegator Delegator
	// Tasks answers task_status (nil: the Delegator, if it is a
	// TaskReader; else task_status is answered "delegation is not
	// available").
	Tasks TaskReader
	// Tools issues each turn's token of the agent tools over MCP, served
	// at MCPURL (the bridge's /mcp endpoint). Either unset: turns get no
	// MCP access (Turn.MCPURL and Turn.MCPToken stay empty).
	Tools  ToolIssuer
	MCPURL string
	// OnTurn, if set, is told how each turn ended (TurnFinal, TurnYielded,
	// TurnFailed, TurnStopped, TurnInterrupted) and how long it took
	// (metrics).
	OnTurn func(agent, outcome string, took time.Duration)
	// OnUsage, if set, is told what each turn that reported it cost
	// (metrics).
	OnUsage func(agent string, u requests.Usage)
	// Live, if set, shows the turns' work as it happens (deltas, thinking,
	// the tool timeline) in the requests' threads; it keeps them in memory.
	Live Live
}

// NewScheduler returns a scheduler for agents. Set Approver and Delegator
// before Run.
func NewScheduler(svc *requests.Service, th *threads.Threads, log *slog.Logger, agents ...Agent) *Scheduler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{svc: svc, threads: th, agents: agents, log: log, drain: make(chan struct{})}
}

// Drain stops the scheduler gracefully: no new turn starts, and running
// turns are interrupted at their next safe point (Turn.Drain; their requests
// stay running, to be resumed by the next Run). Run returns once they are.
// Ending Run's context instead interrupts running turns at once.
func (s *Scheduler) Drain() { s.drainOnce.Do(func() { close(s.drain) }) }

func (s *Scheduler) draining() bool {
	select {
	case <-s.drain:
		return true
	default:
		return false
	}
}

// Run works until ctx ends, or until Drain was called and the running turns
// have stopped. A request running when ctx ends (or interrupted by Drain)
// stays running, to be resumed by the next Run (after a restart, or on a new
// leader).
func (s *Scheduler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, a := range s.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.work(ctx, a)
		}()
	}
	wg.Wait()
	return nil
}

// jobKind is what a worker does with the request NextTx gave it.
type jobKind int

const (
	jobStart  jobKind = iota + 1 // approved: start its first turn
	jobResume                    // running, not waiting: its turn was cut by a restart
	jobWake                      // running, waiting, input arrived: its next turn
	jobCancel                    // running, waiting, cancel asked: end it now
)

// job is the next thing an agent's worker does.
type job struct {
	kind  jobKind
	r     *requests.Request
	input []pendingInput
	// turn is the number of the request's turn that a resume repeats.
	turn int
	// woken: the request has had a turn after its first, so its agent has
	// had the ask (a resume then carries only the pending input, like the
	// wake).
	woken bool
}

func (s *Scheduler) work(ctx context.Context, a Agent) {
	wake, unsub := s.svc.Store().Subscribe(requests.TopicAgent(a.Name))
	defer unsub()
	retry := time.Duration(0)
	for ctx.Err() == nil && !s.draining() {
		j, err := s.next(ctx, a.Name)
		if err == nil && j != nil {
			err = s.run(ctx, a, j)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			retry = min(max(2*retry, minRetry), maxRetry)
			s.log.ErrorContext(ctx, "agent queue", "agent", a.Name, "error", err, "retry_in", retry)
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
			case <-s.drain:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		retry = 0
		if j == nil {
			select {
			case <-ctx.Done():
			case <-s.drain:
			case <-wake:
			}
		}
	}
}

// next reads what agent should do next: one index entry (NextTx), plus the
// request's waiting marker and pending input. Nil: nothing to do until a
// wake.
func (s *Scheduler) next(ctx context.Context, agent string) (*job, error) {
	var j *job
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		j = nil
		r, err := s.svc.NextTx(tx, agent)
		if err != nil || r == nil {
			return err
		}
		in, err := pendingInputTx(tx, r)
		if err != nil {
			return err
		}
		if r.State == requests.Approved {
			j = &job{kind: jobStart, r: r, input: in}
			return nil
		}
		parked, err := parkedTx(tx, r)
		switch {
		case err != nil:
			return err
		case !parked:
			t, woken, err := turnTx(tx, r)
			if err != nil {
				return err
			}
			j = &job{kind: jobResume, r: r, input: resumedInput(t, in), woken: woken}
			if t != nil {
				j.turn = t.Turn
			}
		case r.CancelRequested:
			j = &job{kind: jobCancel, r: r, input: in}
		case len(in) > 0:
			j = &job{kind: jobWake, r: r, input: in}
		}
		return nil
	})
	return j, err
}

// run takes the job's request through one turn and records how it ended. An
// error is a store error worth a retry; a failed turn is not an error.
func (s *Scheduler) run(ctx context.Context, a Agent, j *job) error {
	r := j.r
	if s.draining() {
		return nil // picked as the drain began: the next start takes it
	}
	log := s.log.With("request_id", r.ID.String(), "agent", a.Name)
	switch {
	case j.kind == jobResume && r.CancelRequested:
		// Cancelled while the bridge was down: no process runs, so
		// this is the safe point. No turn had the pending input (nil):
		// end reports each item as undelivered.
		log.InfoContext(ctx, "cancelled while interrupted")
		return s.end(ctx, r.ID, requests.Cancel, "", r.Result, nil)
	case j.kind == jobCancel:
		// Between turns: no turn had the pending input (nil), so end reports
		// each item as undelivered rather than dropping it.
		return s.end(ctx, r.ID, requests.Cancel, "", r.Result, nil)
	}
	r, num, err := s.begin(ctx, j)
	if err != nil {
		return s.beginFailed(ctx, j, err)
	}
	failpoint.Hit(failpoint.TurnStarted) // the turn is recorded; its agent has not run
	log.InfoContext(ctx, "turn starting", "turn", num, "resumed", j.kind == jobResume, "session", r.Session, "inputs", len(j.input))
	return s.runTurn(ctx, log, a, j, r, num)
}

// begin records the start of the job's turn (a start, a resume or a wake)
// and returns the request as it now is and the turn's number.
func (s *Scheduler) begin(ctx context.Context, j *job) (*requests.Request, int, error) {
	switch j.kind {
	case jobStart:
		return s.beginStart(ctx, j)
	case jobResume:
		return s.beginResume(ctx, j)
	case jobWake:
		return s.beginWake(ctx, j)
	}
	return j.r, j.turn, nil
}

// beginStart starts an approved request: its first turn.
func (s *Scheduler) beginStart(ctx context.Context, j *job) (*requests.Request, int, error) {
	r, num := j.r, j.turn
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		var err error
		if r, err = s.svc.ApplyTx(tx, j.r.ID, requests.Change{Event: requests.Start, Actor: actor}); err != nil {
			return err
		}
		num = 1
		return putTurnTx(tx, r, num, j.input)
	})
	return r, num, err
}

// beginResume resumes a request whose turn a restart cut, said in its
// thread; the turn keeps the number of the turn it repeats.
func (s *Scheduler) beginResume(ctx context.Context, j *job) (*requests.Request, int, error) {
	r := j.r
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		if _, err := s.svc.UpdateTx(tx, r.ID, actor, "interrupted", "the bridge stopped while the request ran", func(*requests.Request) {}); err != nil {
			return err
		}
		var err error
		r, err = s.svc.ApplyTx(tx, r.ID, requests.Change{Event: requests.Resume, Actor: actor,
			Detail: "resumed with session " + orNone(r.Session)})
		if err != nil {
			return err
		}
		// Said in its thread, with the resume: not silently.
		return s.threads.Reply(tx, r, chat.Message{Kind: "reply", Text: ResumedNote})
	})
	return r, j.turn, err
}

// beginWake unparks a waiting request that input arrived for: its next turn.
func (s *Scheduler) beginWake(ctx context.Context, j *job) (*requests.Request, int, error) {
	r, num := j.r, j.turn
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		if err := tx.Delete(bucketParked, requestKey(r)); err != nil {
			return err
		}
		t, _, err := turnTx(tx, r)
		if err != nil {
			return err
		}
		// A wake follows at least a first turn (none recorded: a
		// request started by an earlier version).
		num = 2
		if t != nil {
			num = max(t.Turn, 1) + 1
		}
		if err := putTurnTx(tx, r, num, j.input); err != nil {
			return err
		}
		r, err = s.svc.UpdateTx(tx, r.ID, actor, "wake", fmt.Sprintf("next turn with %d new input(s)", len(j.input)),
			func(r *requests.Request) { r.Activity = "" })
		return err
	})
	return r, num, err
}

// beginFailed handles a turn whose start could not be recorded: a request
// changed under us is re-read, a turn too large to record fails its
// request, and any other error is the store's (worth a retry).
func (s *Scheduler) beginFailed(ctx context.Context, j *job, err error) error {
	if errors.Is(err, requests.ErrIllegalTransition) {
		// Changed under us (e.g. cancelled as it was picked): re-read.
		return nil
	}
	if errors.Is(err, store.ErrTooLarge) {
		// The turn can never be recorded (its input is too large for
		// one transaction): fail the request, not the agent's queue.
		reason := "the turn could not be started: " + err.Error()
		return s.settle(ctx, j.r.ID, j.input, func(ctx context.Context) error {
			return s.end(ctx, j.r.ID, requests.Fail, reason, "", j.input)
		})
	}
	return fmt.Errorf("agents: start %s: %w", j.r.ID, err)
}

// runTurn runs the started turn number num of request r on a's runtime and
// records how it ended.
func (s *Scheduler) runTurn(ctx context.Context, log *slog.Logger, a Agent, j *job, r *requests.Request, num int) error {
	resumed := j.kind == jobResume
	input, err := s.input(ctx, r, j)
	if err != nil {
		return s.end(ctx, r.ID, requests.Fail, err.Error(), "", j.input)
	}
	cancelCh, stopWatch := s.watchCancel(ctx, r)
	defer stopWatch()
	turn := Turn{
		RequestID: r.ID.String(), Agent: a.Name, Session: r.Session, Resumed: resumed, Number: num,
		Input: input, Cancel: cancelCh, Drain: s.drain,
	}
	revoke := s.issueTools(ctx, log, r.ID, &turn)
	began := time.Now()
	k := &sink{s: s, id: r.ID, r: r, cancel: cancelCh, key: requestKey(r), turn: num, resumed: resumed}
	if s.Live != nil {
		defer s.Live.Ended(r) // after the outcome is recorded (settle)
	}
	out, err := a.Runtime.Run(ctx, turn, k)
	if errors.Is(err, ErrSessionLost) && turn.Session != "" {
		out, err = s.continueLost(ctx, log, a, r, turn, k, err)
	}
	revoke() // the turn is over, however it ended: its token dies now
	if !out.Usage.IsZero() {
		s.recordUsage(context.WithoutCancel(ctx), log, r.ID, a.Name, out.Usage)
	}
	outcome := turnOutcome(ctx, out, err)
	if s.OnTurn != nil {
		s.OnTurn(a.Name, outcome, time.Since(began))
	}
	return s.turnEnded(ctx, log, a, j, r, turn, outcome, out, err)
}

// turnEnded acts on how a turn ended: an interrupted turn or one cut by the
// store resumes later; any other end is recorded (and the runtime told once
// it is committed).
func (s *Scheduler) turnEnded(ctx context.Context, log *slog.Logger, a Agent, j *job, r *requests.Request, turn Turn, outcome string, out Outcome, ran error) error {
	if outcome == TurnInterrupted {
		log.InfoContext(ctx, "turn interrupted by shutdown; will resume")
		return nil
	}
	if ran != nil && store.Transient(ran) {
		// The store failed under the turn (what it reported could not be
		// written): the turn is cut, not failed; it resumes once the store
		// is back.
		log.WarnContext(ctx, "turn cut by a store error; will resume", "error", ran)
		return fmt.Errorf("agents: turn of %s: %w", r.ID, ran)
	}
	err := s.settle(ctx, r.ID, j.input, func(ctx context.Context) error { return s.record(ctx, log, r, out, ran, j.input) })
	if st, ok := a.Runtime.(Settler); ok && err == nil {
		st.Settled(context.WithoutCancel(ctx), turn) // the end is committed: the runtime may let go of it
	}
	return err
}

// input builds a turn's input: a request's ask and the results of the
// requests it mentions (not on a turn after a yield: the session has them),
// then what arrived for it.
func (s *Scheduler) input(ctx context.Context, r *requests.Request, j *job) ([]Input, error) {
	var in []Input
	if j.kind != jobWake && !j.woken {
		in = append(in, Input{Kind: InputAsk, Text: r.Ask, RequestID: r.ID.String()})
		refs, err := s.references(ctx, r)
		if err != nil {
			return nil, err
		}
		in = append(in, refs...)
	}
	for _, it := range j.input {
		in = append(in, it.in)
	}
	return in, nil
}

// watchCancel returns a channel closed once request r has a cancel request.
func (s *Scheduler) watchCancel(ctx context.Context, r *requests.Request) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	wake, unsub := s.svc.Store().Subscribe(requests.TopicAgent(r.Agent))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer unsub()
		for {
			cur, err := s.svc.Get(ctx, r.ID)
			if err == nil && cur.CancelRequested {
				close(ch)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
		}
	}()
	return ch, func() { cancel(); wg.Wait() }
}

// ResumedNote is said in a request's thread when its turn resumes after
// the bridge stopped during it.
const ResumedNote = "resumed after a restart"

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
