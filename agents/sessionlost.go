package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// ErrSessionLost: the runtime could not resume the turn's session because
// its agent no longer has it (another machine after a failover, a changed
// HOME, deleted files). The scheduler then continues the request in a fresh
// session whose input recaps it (InputRecap), instead of failing it.
var ErrSessionLost = errors.New("agent session lost")

// recapRecords bounds how many of the request's audit records a recap
// quotes (the latest), and recapLine each one.
const (
	recapRecords = 40
	recapLine    = 300
)

// continueLost runs turn t again in a fresh session after its resume found
// the session gone (lost wraps ErrSessionLost): it audits session_lost and
// clears the request's session, says so in the thread, and gives the agent
// the ask, the referenced results and a recap of what the bridge recorded,
// with the turn's new input after them.
func (s *Scheduler) continueLost(ctx context.Context, log *slog.Logger, a Agent, r *requests.Request, t Turn, k *sink, lost error) (Outcome, error) {
	log.WarnContext(ctx, "agent session lost; continuing in a fresh session", "session", t.Session, "error", lost)
	recap, err := s.recap(ctx, r)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w; and its recap: %w", lost, err)
	}
	note := fmt.Sprintf("%s's session %s is gone (%s); it continues in a fresh session, from a recap of this request.",
		a.Name, t.Session, clip.Line(lost.Error(), 200, clip.Bytes))
	err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
		cur, err := s.svc.UpdateTx(tx, r.ID, actor, "session_lost", "session "+t.Session+": "+clip.Line(lost.Error(), 500, clip.Bytes),
			func(r *requests.Request) { r.Session = "" })
		if err != nil {
			return err
		}
		return s.threads.Reply(tx, cur, chat.Message{Kind: "reply", Text: note})
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("%w; recording it: %w", lost, err)
	}
	in := []Input{{Kind: InputAsk, Text: r.Ask, RequestID: r.ID.String()}}
	refs, err := s.references(ctx, r)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w; its recap: %w", lost, err)
	}
	in = append(append(in, refs...), Input{Kind: InputRecap, RequestID: r.ID.String(), Text: recap})
	for _, x := range t.Input {
		if x.Kind != InputAsk && x.Kind != InputReference {
			in = append(in, x)
		}
	}
	t.Session, t.Resumed, t.Input = "", true, in
	return a.Runtime.Run(ctx, t, k)
}

// recap is what the bridge recorded of request r so far, for an agent that
// lost its session: the latest records of its audit trail (its turns, the
// agent's calls and their answers, its progress, approvals), its last
// status, and that it was interrupted.
func (s *Scheduler) recap(ctx context.Context, r *requests.Request) (string, error) {
	recs, err := audit.List(ctx, s.svc.Store(), audit.Query{RequestID: r.ID.String()}, 0)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("You were working on this request in an earlier session, which the agent program no longer has. ")
	b.WriteString("What the bridge recorded of it so far:\n")
	if len(recs) > recapRecords {
		fmt.Fprintf(&b, "(%d earlier records left out)\n", len(recs)-recapRecords)
		recs = recs[len(recs)-recapRecords:]
	}
	for _, rec := range recs {
		line := rec.Action
		if rec.Detail != "" {
			line += ": " + rec.Detail
		}
		fmt.Fprintf(&b, "- %s %s\n", rec.Time.UTC().Format("15:04:05"), clip.Line(line, recapLine, clip.Bytes))
	}
	if r.Activity != "" || r.Progress > 0 {
		fmt.Fprintf(&b, "Last status: %d%% %s\n", r.Progress, r.Activity)
	}
	if r.Result != "" {
		fmt.Fprintf(&b, "Said so far: %s\n", clip.Text(r.Result, 2000, clip.Bytes))
	}
	b.WriteString("You were interrupted: continue the request from here; do not redo what the record shows as done.")
	return b.String(), nil
}
