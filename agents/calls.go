package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Call carries out an agent's tool call for request id. It is the one
// dispatcher behind both transports of the agent tools: the exec
// protocol's calls (through the turn's Sink) and the MCP tools
// (delegation/mcptools, which map each tool to an Event: ask_agent,
// background_run, task_status, request_approval, ask_user, and
// report_progress as EventProgress). So both offer the same tools, with the same checks,
// refusals and audit records; a new tool is one more case here.
//
// A call nobody can serve, or with bad input, is answered with an Error and
// audited (call_refused); the delegator audits its own refusals. It returns
// when ctx ends, at the latest.
func (s *Scheduler) Call(ctx context.Context, id requests.ID, ev Event) Response {
	switch ev.Type {
	case EventRequestApproval:
		if s.Approver == nil {
			return s.refuse(ctx, id, ev, Response{Text: "not approved: no approver configured"})
		}
		d, err := s.Approver.RequestApproval(ctx, id.String(), ev.Action)
		if err != nil {
			resp := Response{Text: "not approved: " + err.Error(), Error: err.Error()}
			if ctx.Err() != nil {
				return resp // the turn ended while waiting: nothing was refused
			}
			return s.refuse(ctx, id, ev, resp)
		}
		return Response{OK: d.Approved(), Text: d.Answer(), Approval: d.Approval}
	case EventAskUser:
		q, _ := s.Approver.(Questioner)
		if q == nil {
			return s.refuse(ctx, id, ev, Response{Text: "no answer: nobody to ask (no approvals configured)"})
		}
		d, err := q.AskUser(ctx, id.String(), ev.Text)
		if err != nil {
			resp := Response{Text: "no answer: " + err.Error(), Error: err.Error()}
			if ctx.Err() != nil {
				return resp // the turn ended while waiting: nothing was refused
			}
			return s.refuse(ctx, id, ev, resp)
		}
		resp := Response{OK: d.Answered(), Text: d.Answer(), Question: d.Approval}
		if d.Answered() {
			resp.From = d.By
		}
		return resp
	case EventAskAgent:
		if s.Delegator == nil {
			return s.refuse(ctx, id, ev, Response{Error: "delegation is not available"})
		}
		rb, err := s.Delegator.AskAgent(ctx, id, ev.Agent, ev.Text)
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{OK: true, RequestID: rb.String()}
	case EventBackgroundRun:
		if s.Delegator == nil {
			return s.refuse(ctx, id, ev, Response{Error: "delegation is not available"})
		}
		task, err := s.Delegator.BackgroundRun(ctx, id, BackgroundRun{Name: ev.Name, Command: ev.Command, Agent: ev.Agent, Text: ev.Text})
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{OK: true, TaskID: task}
	case EventTaskStatus:
		tr := s.taskReader()
		switch {
		case tr == nil:
			return s.refuse(ctx, id, ev, Response{Error: "delegation is not available"})
		case ev.TaskID == "":
			return s.refuse(ctx, id, ev, Response{Error: "no task_id given"})
		}
		t, err := tr.TaskStatus(ctx, id, ev.TaskID)
		if err != nil {
			return s.refuse(ctx, id, ev, Response{Error: err.Error()})
		}
		return Response{OK: true, TaskID: t.ID, Task: &t}
	case EventProgress:
		refusal, err := s.progress(ctx, id, ev.Percent, ev.Text)
		switch {
		case err != nil:
			return Response{Error: err.Error()}
		case refusal != "":
			return Response{Error: refusal}
		}
		return Response{OK: true}
	}
	return s.refuse(ctx, id, ev, Response{Error: "unknown call " + ev.Type})
}

func (s *Scheduler) taskReader() TaskReader {
	if s.Tasks != nil {
		return s.Tasks
	}
	tr, _ := s.Delegator.(TaskReader)
	return tr
}

// refuse audits a call that was refused and returns its answer.
func (s *Scheduler) refuse(ctx context.Context, id requests.ID, ev Event, resp Response) Response {
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		return refusedTx(tx, s.svc, r, ev.Type+": "+firstNonEmpty(resp.Error, resp.Text))
	})
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "auditing a refused call", "request_id", id.String(), "error", err)
	}
	return resp
}

// refusedTx appends the audit record of a refused call of r's agent.
func refusedTx(tx store.Tx, svc *requests.Service, r *requests.Request, detail string) error {
	return audit.Append(tx, audit.Record{Time: svc.Clock().Now().UTC(), RequestID: r.ID.String(),
		Actor: "agent:" + r.Agent, Action: "call_refused", From: r.State.String(), To: r.State.String(),
		Detail: detail})
}

// progress records a progress report of request id's agent. Bad input (a
// percent outside 0-100) or a request that is not running is refused: the
// refusal is returned and audited in the same transaction, and nothing
// changes. err is a store error.
func (s *Scheduler) progress(ctx context.Context, id requests.ID, percent int, text string) (refusal string, err error) {
	err = s.svc.Store().Update(ctx, func(tx store.Tx) error {
		refusal = ""
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		switch {
		case percent < 0 || percent > 100:
			refusal = fmt.Sprintf("progress %d is outside 0-100", percent)
		case r.State != requests.Running:
			refusal = fmt.Sprintf("%s is %s, not running", r.ID, r.State)
		}
		if refusal != "" {
			return refusedTx(tx, s.svc, r, EventProgress+": "+refusal)
		}
		_, err = s.svc.UpdateTx(tx, id, "agent", "", "", func(r *requests.Request) { r.Progress, r.Activity = percent, text })
		return err
	})
	if err != nil {
		return "", fmt.Errorf("agents: progress of %s: %w", id, err)
	}
	return refusal, nil
}

// issueTools gives turn t its MCP access, when the scheduler has a
// ToolIssuer and an MCP URL, and returns the func that revokes it. A token
// that cannot be issued (a store error) is logged: the turn runs without
// the MCP tools rather than not at all. The token itself is never logged.
func (s *Scheduler) issueTools(ctx context.Context, log *slog.Logger, id requests.ID, t *Turn) func() {
	if s.Tools == nil || s.MCPURL == "" {
		return func() {}
	}
	token, revoke, err := s.Tools.Issue(ctx, id)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.WarnContext(ctx, "issuing the turn's MCP token failed; the turn runs without the MCP tools", "error", err)
		}
		return func() {}
	}
	t.MCPURL, t.MCPToken = s.MCPURL, token
	return revoke
}

// finalOrWait ends the turn of an agent that cannot yield (Outcome.
// YieldIfWaiting: a CLI agent that delegated over MCP): if the request
// waits on a rendezvous or task it started, or the result of one arrived
// during the turn, its final text is posted in the thread and the request
// waits, as after a yield (DESIGN §3: a turn that ends with "task started"
// is not an answer). Otherwise the text is its answer. Replies of people
// that arrived during the turn do not make it wait: they are reported as
// undelivered, as for any final answer.
func (s *Scheduler) finalOrWait(ctx context.Context, r *requests.Request, final string, got []inboxItem) error {
	waiting, err := s.waiting(ctx, r.ID)
	if err != nil {
		return s.end(ctx, r.ID, requests.Fail, "the turn ended, but what the request waits on could not be read: "+err.Error(), "", got)
	}
	delegated := func(in Input) bool { return in.Kind == InputTaskResult || in.Kind == InputAnswer }
	parked, err := s.park(ctx, r, waiting, "on delegated work", final, got, delegated)
	if err != nil || parked {
		return err
	}
	return s.end(ctx, r.ID, requests.Finish, "", final, got)
}
