package threads

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/store"
)

// stream is one request's live message: the coalescer (what was written
// and not yet shown) and its sender. Adding is a locked append and a
// non-blocking kick; the sender takes whatever has piled up when the
// surface's pace allows, so one update carries many deltas.
type stream struct {
	l       *Live
	id      string
	surface string
	rt      route
	conn    chat.Streamer
	pace    time.Duration
	// recipient is the asker on this surface (chat.Message.Recipient).
	recipient string

	mu       sync.Mutex
	text     strings.Builder // the live text of the current segment
	sent     int             // how much of text is shown
	gen      int             // segments so far (Said starts a new one)
	thinking string
	shownTh  string
	steps    []chat.ToolStep // not yet shown
	running  map[string][]runningStep
	nsteps   int
	msg      chat.MessageRef // the live message (ID "" until it opens)
	broken   bool            // opening failed: nothing more is shown

	kick     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	last     time.Time // when the sender last showed an update
}

type runningStep struct {
	id    string
	began time.Time
}

func newStream(l *Live, id, surface string, rt route) *stream {
	return &stream{l: l, id: id, surface: surface, rt: rt, conn: rt.conn.(chat.Streamer), pace: pace(rt),
		running: map[string][]runningStep{}, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// add changes the coalescer under its lock and wakes the sender.
func (s *stream) add(fn func()) {
	s.mu.Lock()
	fn()
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// newSegment starts the live text anew (the agent posted it as a message).
func (s *stream) newSegment() {
	s.text.Reset()
	s.sent = 0
	s.gen++
}

// step records a tool starting or ending at now (under s.mu).
func (s *stream) step(now time.Time, phase, name string) {
	if phase != "end" {
		s.nsteps++
		id := "t" + strconv.Itoa(s.nsteps)
		s.running[name] = append(s.running[name], runningStep{id: id, began: now})
		s.steps = append(s.steps, chat.ToolStep{ID: id, Name: name, Status: chat.StepStarted})
		return
	}
	open := s.running[name]
	st := chat.ToolStep{Name: name, Status: chat.StepDone}
	if len(open) == 0 {
		s.nsteps++
		st.ID = "t" + strconv.Itoa(s.nsteps)
	} else {
		r := open[len(open)-1]
		s.running[name] = open[:len(open)-1]
		st.ID, st.Took = r.id, now.Sub(r.began)
	}
	s.steps = append(s.steps, st)
}

// snapshot is what the sender shows next, and how to mark it shown.
type snapshot struct {
	u      chat.StreamUpdate
	gen    int
	sentTo int
	nsteps int
}

// take returns what changed since the last update (false: nothing).
func (s *stream) take() (snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := s.text.String()
	if s.broken || (len(text) == s.sent && len(s.steps) == 0 && s.thinking == s.shownTh) {
		return snapshot{}, false
	}
	u := chat.StreamUpdate{Delta: text[s.sent:], Text: text, Steps: append([]chat.ToolStep(nil), s.steps...), Thinking: s.thinking}
	return snapshot{u: u, gen: s.gen, sentTo: len(text), nsteps: len(s.steps)}, true
}

// shown marks snapshot sn as shown.
func (s *stream) shown(sn snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sn.gen == s.gen {
		s.sent = sn.sentTo
	}
	s.steps = s.steps[sn.nsteps:]
	s.shownTh = sn.u.Thinking
}

// send is the sender: it shows the coalesced updates, at most one per pace,
// until stopped.
func (s *stream) send(ctx context.Context) {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		case <-s.kick:
		case <-timer.C:
		}
		if !s.last.IsZero() {
			if wait := s.last.Add(s.pace).Sub(s.l.clock.Now()); wait > 0 {
				timer.Reset(wait)
				continue
			}
		}
		sn, ok := s.take()
		if !ok {
			continue
		}
		// The pace runs from the update's start: a surface counts the calls
		// it sees, and the next one is due a pace after this one began
		// (after it returned, the clock may have moved on: then a sender
		// that measured from there would wait longer than the pace).
		s.last = s.l.clock.Now()
		err := s.push(ctx, sn.u)
		var ra *chat.RetryAfterError
		switch {
		case errors.Is(err, errNoThread):
			timer.Reset(s.pace) // the parent is not posted yet: keep it all
		case errors.As(err, &ra):
			timer.Reset(max(s.pace, ra.After)) // the surface's budget: keep it, coalescing
		case err != nil && ctx.Err() == nil:
			s.l.log.WarnContext(ctx, "live update failed", "request_id", s.id, "surface", s.surface, "error", err)
			timer.Reset(s.pace)
		case err == nil:
			s.shown(sn)
		}
	}
}

var errNoThread = errors.New("the thread is not posted yet")

// push shows u, opening the live message first (and recording it) if it
// is not open yet. Every append is claimed like any send (HA: a deposed
// leader shows nothing more); appends are paced, so that is a claim per
// update at the surface's pace, never one per delta.
func (s *stream) push(ctx context.Context, u chat.StreamUpdate) error {
	if s.msg.ID == "" {
		if err := s.openMessage(ctx); err != nil {
			return err
		}
	} else if err := s.rt.claim(ctx); err != nil {
		return err
	}
	return s.conn.AppendStream(ctx, s.msg, u)
}

// openMessage opens the live message in the request's thread and records
// its reference before anything is shown in it (a restart then finds it).
func (s *stream) openMessage(ctx context.Context) error {
	var tref chat.ThreadRef
	err := s.l.store.View(ctx, func(tx store.Tx) error {
		var err error
		tref, err = ThreadRef(tx, s.surface, s.id)
		return err
	})
	if isNotFound(err) {
		return errNoThread
	}
	if err == nil {
		err = s.rt.claim(ctx)
	}
	var ref chat.MessageRef
	if err == nil {
		ref, err = s.conn.OpenStream(ctx, tref, chat.Message{Request: s.id, Kind: "live", Recipient: s.recipient})
	}
	if err == nil {
		err = s.l.record(ctx, s.surface, s.id, ref)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.broken = true
		return err
	}
	s.msg = ref
	return nil
}

// ref is the live message (zero until it opens).
func (s *stream) ref() chat.MessageRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msg
}

// stopped reports whether the sender has ended.
func (s *stream) stopped() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop ends the sender (after the update it is showing, if any) and
// returns the live message.
func (s *stream) stop() chat.MessageRef {
	s.stopOnce.Do(func() { close(s.quit) })
	<-s.done
	return s.ref()
}
