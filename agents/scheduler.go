package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/threads"
)

// actor is how the scheduler appears in the audit log.
const actor = "system:scheduler"

// Agent is a named runtime the scheduler runs requests on.
type Agent struct {
	Name    string
	Runtime Runtime
}

// Scheduler runs each agent's requests one at a time in ID order, and
// different agents in parallel. It is woken by store notifications; on start
// it resumes every running request with its stored session.
type Scheduler struct {
	svc     *requests.Service
	threads *threads.Threads
	agents  []Agent
	log     *slog.Logger
}

// NewScheduler returns a scheduler for agents.
func NewScheduler(svc *requests.Service, th *threads.Threads, log *slog.Logger, agents ...Agent) *Scheduler {
	return &Scheduler{svc: svc, threads: th, agents: agents, log: log}
}

// Run works until ctx ends. A request running when ctx ends stays running,
// to be resumed by the next Run (after a restart, or on a new leader).
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

func (s *Scheduler) work(ctx context.Context, a Agent) {
	wake, cancel := s.svc.Store().Subscribe(requests.TopicAgent(a.Name))
	defer cancel()
	for ctx.Err() == nil {
		var next *requests.Request
		err := s.svc.Store().View(ctx, func(tx store.Tx) error {
			var err error
			next, err = s.svc.NextTx(tx, a.Name)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "reading queue", "agent", a.Name, "error", err)
			}
		}
		if err != nil || next == nil {
			select {
			case <-ctx.Done():
			case <-wake:
			}
			continue
		}
		s.run(ctx, a, next)
	}
}

// run takes r from approved (or interrupted running) to a terminal state.
func (s *Scheduler) run(ctx context.Context, a Agent, r *requests.Request) {
	log := s.log.With("request_id", r.ID.String(), "agent", a.Name)
	resumed := r.State == requests.Running
	var err error
	if resumed {
		err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
			if _, err := s.svc.UpdateTx(tx, r.ID, actor, "interrupted", "the bridge stopped while the request ran", func(*requests.Request) {}); err != nil {
				return err
			}
			var err error
			r, err = s.svc.ApplyTx(tx, r.ID, requests.Change{Event: requests.Resume, Actor: actor,
				Detail: "resumed with session " + orNone(r.Session)})
			return err
		})
	} else {
		r, err = s.svc.Apply(ctx, r.ID, requests.Change{Event: requests.Start, Actor: actor})
	}
	if err != nil {
		if ctx.Err() == nil {
			log.ErrorContext(ctx, "starting request", "error", err)
		}
		return
	}
	log.InfoContext(ctx, "turn starting", "resumed", resumed, "session", r.Session)

	input, err := s.input(ctx, r)
	if err != nil {
		s.end(ctx, r.ID, requests.Fail, err.Error(), "")
		return
	}
	cancelCh, stopWatch := s.watchCancel(ctx, r.ID)
	defer stopWatch()
	out, err := a.Runtime.Run(ctx, Turn{
		RequestID: r.ID.String(), Agent: a.Name, Session: r.Session, Resumed: resumed,
		Input: input, Cancel: cancelCh,
	}, &sink{s: s, id: r.ID})
	if ctx.Err() != nil {
		log.InfoContext(ctx, "turn interrupted by shutdown; will resume")
		return
	}
	switch {
	case err != nil:
		log.WarnContext(ctx, "turn failed", "error", err)
		s.end(ctx, r.ID, requests.Fail, err.Error(), "")
	case out.Stopped:
		s.end(ctx, r.ID, requests.Cancel, "", out.Final)
	case out.Yielded:
		s.end(ctx, r.ID, requests.Fail, "the agent yielded, but it waits on nothing", "")
	default:
		s.end(ctx, r.ID, requests.Finish, "", out.Final)
	}
}

// end applies the terminal event. A cancel keeps the reason recorded when it
// was requested.
func (s *Scheduler) end(ctx context.Context, id requests.ID, ev requests.Event, reason, result string) {
	_, err := s.svc.Apply(ctx, id, requests.Change{Event: ev, Actor: actor, Detail: reason,
		Mutate: func(r *requests.Request) {
			if reason != "" {
				r.Reason = reason
			}
			r.Result = result
			r.Progress, r.Activity = 0, ""
		}})
	if err != nil && ctx.Err() == nil {
		s.log.ErrorContext(ctx, "ending request", "request_id", id.String(), "event", ev.String(), "error", err)
	}
}

// input builds a turn's input: the ask, then the results of the requests it
// mentions.
func (s *Scheduler) input(ctx context.Context, r *requests.Request) ([]Input, error) {
	in := []Input{{Kind: InputAsk, Text: r.Ask, RequestID: r.ID.String()}}
	for _, id := range r.References {
		ref, err := s.svc.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("reference %s: %w", id, err)
		}
		text := ref.Result
		if text == "" && ref.Reason != "" {
			text = ref.Reason
		}
		in = append(in, Input{Kind: InputReference, RequestID: id.String(), State: ref.State.String(), Text: text})
	}
	return in, nil
}

// watchCancel returns a channel closed once request id has a cancel request.
func (s *Scheduler) watchCancel(ctx context.Context, id requests.ID) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	r, _ := s.svc.Get(ctx, id)
	wake, unsub := s.svc.Store().Subscribe(requests.TopicAgent(r.Agent))
	go func() {
		defer unsub()
		for {
			r, err := s.svc.Get(ctx, id)
			if err == nil && r.CancelRequested {
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
	return ch, cancel
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// sink records what the agent reports, through the store.
type sink struct {
	s  *Scheduler
	id requests.ID
}

func (k *sink) update(ctx context.Context, action, detail string, fn func(*requests.Request)) error {
	return k.s.svc.Store().Update(ctx, func(tx store.Tx) error {
		_, err := k.s.svc.UpdateTx(tx, k.id, "agent", action, detail, fn)
		return err
	})
}

func (k *sink) Session(ctx context.Context, id string) error {
	return k.update(ctx, "session", id, func(r *requests.Request) { r.Session = id })
}

func (k *sink) Tool(ctx context.Context, phase, name string) error {
	return k.update(ctx, "", "", func(r *requests.Request) {
		if phase == "start" {
			r.Activity = name
		} else {
			r.Activity = ""
		}
	})
}

func (k *sink) Progress(ctx context.Context, percent int, text string) error {
	if percent < 0 || percent > 100 {
		return errors.New("agent reported progress outside 0-100")
	}
	return k.update(ctx, "", "", func(r *requests.Request) { r.Progress, r.Activity = percent, text })
}

func (k *sink) Message(ctx context.Context, text string) error {
	return k.s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := k.s.svc.GetTx(tx, k.id)
		if err != nil {
			return err
		}
		return k.s.threads.Reply(tx, r, chat.Message{Kind: "reply", Text: text})
	})
}
