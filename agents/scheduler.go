package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
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
	var err error
	num := j.turn // a resumed turn keeps the number of the turn it repeats
	switch j.kind {
	case jobStart:
		err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
			var err error
			if r, err = s.svc.ApplyTx(tx, j.r.ID, requests.Change{Event: requests.Start, Actor: actor}); err != nil {
				return err
			}
			num = 1
			return putTurnTx(tx, r, num, j.input)
		})
	case jobResume:
		if r.CancelRequested {
			// Cancelled while the bridge was down: no process runs, so
			// this is the safe point. No turn had the pending input (nil):
			// end reports each item as undelivered.
			log.InfoContext(ctx, "cancelled while interrupted")
			return s.end(ctx, r.ID, requests.Cancel, "", r.Result, nil)
		}
		err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
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
	case jobCancel:
		// Between turns: no turn had the pending input (nil), so end reports
		// each item as undelivered rather than dropping it.
		return s.end(ctx, r.ID, requests.Cancel, "", r.Result, nil)
	case jobWake:
		err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
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
	}
	if err != nil {
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
	failpoint.Hit(failpoint.TurnStarted) // the turn is recorded; its agent has not run
	resumed := j.kind == jobResume
	log.InfoContext(ctx, "turn starting", "turn", num, "resumed", resumed, "session", r.Session, "inputs", len(j.input))

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
	if outcome == TurnInterrupted {
		log.InfoContext(ctx, "turn interrupted by shutdown; will resume")
		return nil
	}
	if err != nil && store.Transient(err) {
		// The store failed under the turn (what it reported could not be
		// written): the turn is cut, not failed; it resumes once the store
		// is back.
		log.WarnContext(ctx, "turn cut by a store error; will resume", "error", err)
		return fmt.Errorf("agents: turn of %s: %w", r.ID, err)
	}
	ran := err
	err = s.settle(ctx, r.ID, j.input, func(ctx context.Context) error { return s.record(ctx, log, r, out, ran, j.input) })
	if st, ok := a.Runtime.(Settler); ok && err == nil {
		st.Settled(context.WithoutCancel(ctx), turn) // the end is committed: the runtime may let go of it
	}
	return err
}

// record writes how r's turn ended (out, or the runtime's error).
func (s *Scheduler) record(ctx context.Context, log *slog.Logger, r *requests.Request, out Outcome, err error, got []pendingInput) error {
	switch {
	case err != nil:
		log.WarnContext(ctx, "turn failed", "error", err)
		return s.end(ctx, r.ID, requests.Fail, err.Error(), "", got)
	case out.Stopped:
		return s.end(ctx, r.ID, requests.Cancel, "", out.Final, got)
	case out.Yielded:
		return s.yield(ctx, r, out.Reason, got)
	case out.YieldIfWaiting:
		return s.finalOrWait(ctx, r, out.Final, got)
	default:
		return s.end(ctx, r.ID, requests.Finish, "", out.Final, got)
	}
}

// recordUsage adds what a turn cost to its request (audited: the export
// has each turn's), before the turn's end is recorded, so that the final
// status shows it.
func (s *Scheduler) recordUsage(ctx context.Context, log *slog.Logger, id requests.ID, agent string, u requests.Usage) {
	if s.OnUsage != nil {
		s.OnUsage(agent, u)
	}
	detail := fmt.Sprintf("input %d, output %d, cache read %d, cache write %d tokens; $%.4f",
		u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.CostUSD)
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		_, err := s.svc.UpdateTx(tx, id, actor, "usage", detail, func(r *requests.Request) { r.Usage = r.Usage.Add(u) })
		return err
	})
	if err != nil {
		log.WarnContext(ctx, "recording the turn's usage", "error", err)
	}
}

// yield parks a request whose agent ended its turn waiting, if it waits on
// something: what the delegator knows of (an open rendezvous or task), or
// input for it that arrived after the turn began (a task that ended, or an
// answer that came, during the very turn that started it: the next turn
// gets it at once). Otherwise the request fails. The delegator is asked
// first: whatever ends after it answered "nothing" has already put its
// result in the pending input, which the parking transaction then sees.
func (s *Scheduler) yield(ctx context.Context, r *requests.Request, reason string, got []pendingInput) error {
	waiting, err := s.waiting(ctx, r.ID)
	if err != nil {
		return s.end(ctx, r.ID, requests.Fail, "the agent yielded: "+err.Error(), "", got)
	}
	parked, err := s.park(ctx, r, waiting, reason, "", got, func(Input) bool { return true })
	switch {
	case err != nil || parked:
		return err
	case s.Delegator == nil:
		return s.end(ctx, r.ID, requests.Fail, "the agent yielded, but delegation is not available", "", got)
	default:
		return s.end(ctx, r.ID, requests.Fail, "the agent yielded, but it waits on nothing", "", got)
	}
}

// waiting asks the delegator whether request id waits on a rendezvous or
// task (false without a delegator).
func (s *Scheduler) waiting(ctx context.Context, id requests.ID) (bool, error) {
	if s.Delegator == nil {
		return false, nil
	}
	return s.Delegator.Waiting(ctx, id)
}

// park parks request r, whose turn ended waiting, if it waits on
// something: waiting (the delegator's word), or input for it that arrived
// after the turn began and that counts. text, when not empty, is posted in
// the thread (a CLI agent's final answer that is not its answer),
// in the same transaction. It reports whether it parked.
func (s *Scheduler) park(ctx context.Context, r *requests.Request, waiting bool, reason, text string, got []pendingInput, counts func(Input) bool) (bool, error) {
	acked := map[string]bool{}
	for _, it := range got {
		acked[it.key] = true
	}
	parked := false
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		parked = waiting
		if !parked {
			items, err := pendingInputTx(tx, r)
			if err != nil {
				return err
			}
			for _, it := range items {
				parked = parked || (!acked[it.key] && counts(it.in))
			}
		}
		if !parked {
			return nil
		}
		if err := tx.Put(bucketParked, requestKey(r), []byte(reason)); err != nil {
			return err
		}
		if err := forgetCallsTx(tx, r); err != nil {
			return err
		}
		for _, it := range got {
			if err := tx.Delete(bucketInput, it.key); err != nil {
				return err
			}
		}
		after, err := s.svc.UpdateTx(tx, r.ID, actor, "yield", reason, func(r *requests.Request) {
			r.Activity = "waiting"
			if reason != "" {
				r.Activity += ": " + reason
			}
		})
		if err != nil || text == "" {
			return err
		}
		return s.threads.Reply(tx, after, chat.Message{Kind: "reply", Text: s.svc.Clip(text)})
	})
	return parked, err
}

// end applies the terminal event and, in the same transaction, acknowledges
// the pending input items the turn got; items that arrived too late are
// recorded as undelivered (audit and a notice in the thread), never silently dropped. A
// cancel keeps the reason recorded when it was asked; a stop that nobody
// asked for is a failure.
func (s *Scheduler) end(ctx context.Context, id requests.ID, ev requests.Event, reason, result string, got []pendingInput) error {
	acked := map[string]bool{}
	for _, it := range got {
		acked[it.key] = true
	}
	reason, result = s.svc.Clip(reason), s.svc.Clip(result)
	return s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		ev, reason := ev, reason
		if ev == requests.Cancel && !r.CancelRequested {
			ev, reason = requests.Fail, "the agent stopped before it finished"
		}
		after, err := s.svc.ApplyTx(tx, id, requests.Change{Event: ev, Actor: actor, Detail: reason,
			Mutate: func(r *requests.Request) {
				if reason != "" {
					r.Reason = reason
				}
				r.Result = result
				r.Progress, r.Activity = 0, ""
			}})
		if errors.Is(err, requests.ErrIllegalTransition) {
			s.log.WarnContext(ctx, "request changed before its turn ended", "request_id", id.String(), "error", err)
			return nil
		}
		if err != nil {
			return err
		}
		failpoint.Hit(failpoint.TurnEnding) // the end is being recorded: not committed
		failpoint.AtCommit(tx, failpoint.RequestEnded)
		if err := tx.Delete(bucketParked, requestKey(r)); err != nil {
			return err
		}
		if err := tx.Delete(bucketTurns, requestKey(r)); err != nil {
			return err
		}
		if err := tx.Delete(bucketWoken, requestKey(r)); err != nil {
			return err
		}
		if err := forgetCallsTx(tx, r); err != nil {
			return err
		}
		items, err := pendingInputTx(tx, r)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := tx.Delete(bucketInput, it.key); err != nil {
				return err
			}
			if acked[it.key] {
				continue
			}
			what := it.in.Kind
			if it.in.From != "" {
				what += " from " + it.in.From
			}
			if err := audit.Append(tx, audit.Record{Time: after.Updated, RequestID: id.String(), Actor: actor,
				Action: "undelivered", From: after.State.String(), To: after.State.String(),
				Detail: what + " arrived after the last turn: " + clip.Line(it.in.Text, 200, clip.Bytes)}); err != nil {
				return err
			}
			if err := s.threads.Reply(tx, after, chat.Message{Kind: "notice",
				Text: fmt.Sprintf("(%s arrived after the agent's last turn and was not delivered)", what)}); err != nil {
				return err
			}
		}
		return nil
	})
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
