package agents

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Call carries out an agent's tool call for request id. It is the one
// dispatcher behind both transports of the agent tools: the exec
// protocol's calls (through the turn's Sink) and the MCP tools
// (delegation/mcptools, which map each tool to a TurnEvent: ask_agent,
// background_run, task_status, request_approval, ask_user, and
// report_progress as EventProgress). So both offer the same tools, with the same checks,
// refusals and audit records; a new tool is one more case here.
//
// A call nobody can serve, or with bad input, is answered with an Error and
// audited (call_refused); the delegator audits its own refusals. It returns
// when ctx ends, at the latest. An MCP call carries its idempotency key in
// ev.ID (the runner's proxy sends one per call, MCPCallKeyHeader, and
// retries the call with it when the bridge went away without an answer):
// then a call that makes something is done once, and its repeat gets the
// first answer or waits again on the same ask (see MCPCallKey). Without one
// (ev.ID empty: an agent the bridge runs itself) the call is carried out as
// it comes. The exec protocol's calls get their keys from the turn's Sink
// (see CallKey).
func (s *Scheduler) Call(ctx context.Context, id requests.ID, ev TurnEvent) Response {
	if ev.ID == "" {
		return s.call(ctx, id, ev, CallKey{})
	}
	// The key names the request by its store key, which the service's
	// owner and the ID make: no read here (the call's own transaction
	// reads the request).
	return s.call(ctx, id, ev, MCPCallKey(ownedKey(s.svc.Owner(), id), ev))
}

// call is Call with the call's idempotency key (zero: none).
func (s *Scheduler) call(ctx context.Context, id requests.ID, ev TurnEvent, key CallKey) Response {
	switch ev.Type {
	case EventRequestApproval:
		if s.Approver == nil {
			return s.refuse(ctx, id, ev, Response{Text: "not approved: no approver configured"})
		}
		d, err := s.askPeople(ctx, id, ev, key)
		if err != nil {
			resp := Response{Text: "not approved: " + err.Error(), Error: err.Error()}
			if ctx.Err() != nil {
				return resp // the turn ended while waiting: nothing was refused
			}
			return s.refuse(ctx, id, ev, resp)
		}
		return Response{OK: d.Approved(), Text: d.Answer(), Approval: d.Approval}
	case EventAskUser:
		if q, _ := s.Approver.(Questioner); q == nil {
			return s.refuse(ctx, id, ev, Response{Text: "no answer: nobody to ask (no approvals configured)"})
		}
		d, err := s.askPeople(ctx, id, ev, key)
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
		rb, err := s.Delegator.AskAgent(ctx, id, ev.Agent, ev.Text, key)
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{OK: true, RequestID: rb.String()}
	case EventBackgroundRun:
		if s.Delegator == nil {
			return s.refuse(ctx, id, ev, Response{Error: "delegation is not available"})
		}
		task, err := s.Delegator.BackgroundRun(ctx, id, BackgroundRun{Name: ev.Name, Command: ev.Command, Agent: ev.Agent, Text: ev.Text,
			Key: key})
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
		refusal, err := s.progress(ctx, id, ev.Percent, ev.Text, s.callOnce(id, key))
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

// asker is what the scheduler needs of an Approver to journal an agent's
// asks of people (request_approval, ask_user): open an ask and wait on it
// apart. *approvals.Service is one.
type asker interface {
	Open(ctx context.Context, ask approvals.ActionAsk) (*approvals.Approval, error)
	OpenQuestion(ctx context.Context, requestID, question string) (*approvals.Approval, error)
	Wait(ctx context.Context, id string) (approvals.Decision, error)
}

var _ asker = (*approvals.Service)(nil)

// askPeople asks the people of request id's room for a permission
// (request_approval) or an answer (ask_user) and waits for it. With a key
// (an exec-protocol call) and an Approver that is an asker, the ask's ID is
// journaled under the key as soon as it is open: the same call repeated by
// the resumed turn waits on that ask, and so gets its decision (taken
// before or after the cut) rather than opening a second card. The journal
// is written just after the ask opens; a repeat in between finds the ask
// still pending, and approvals reuses a pending ask with the same text.
func (s *Scheduler) askPeople(ctx context.Context, id requests.ID, ev TurnEvent, key CallKey) (approvals.Decision, error) {
	question := ev.Type == EventAskUser
	o, ok := s.Approver.(asker)
	if !ok || key.IsZero() {
		if question {
			return s.Approver.(Questioner).AskUser(ctx, id.String(), ev.Text)
		}
		return s.Approver.RequestApproval(ctx, id.String(), ev.Action)
	}
	askID := ""
	if key.resumed {
		err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
			r, err := s.svc.GetTx(tx, id)
			if err != nil {
				return err
			}
			prev, _, err := ReplayCallTx(tx, s.svc, r, key)
			askID = cmp.Or(prev.Approval, prev.Question)
			return err
		})
		if err != nil {
			return approvals.Decision{}, err
		}
	}
	if askID == "" {
		var a *approvals.Approval
		var err error
		rec := Response{}
		if question {
			a, err = o.OpenQuestion(ctx, id.String(), ev.Text)
		} else {
			a, err = o.Open(ctx, approvals.ActionAsk{RequestID: id.String(), Action: ev.Action})
		}
		if err != nil {
			return approvals.Decision{}, err
		}
		if askID = a.ID; question {
			rec.Question = a.ID
		} else {
			rec.Approval = a.ID
		}
		// Recorded even if the call is cut now: the ask is open, and the
		// call sent again must wait on it, not open another.
		if err := s.recordAsk(context.WithoutCancel(ctx), id, key, rec); err != nil {
			return approvals.Decision{}, err
		}
	}
	return o.Wait(ctx, askID)
}

// recordAsk journals the ask an agent's call opened (rec) under key,
// unless request id has ended: its turn is over, and the end forgot its
// calls (forgetCallsTx) in the transaction that ended it, so an entry
// written now would never be deleted. Reading the state in the same
// transaction as the write leaves no gap: an end committed first is seen
// here, one committed after deletes what this wrote.
func (s *Scheduler) recordAsk(ctx context.Context, id requests.ID, key CallKey, rec Response) error {
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, id)
		if err != nil || r.State.Terminal() {
			return err
		}
		return RecordCallTx(tx, key, rec)
	})
	if err != nil {
		return fmt.Errorf("agents: journal %s of %s: %w", key, id, err)
	}
	return nil
}

// CallKey is the idempotency key of an exec-protocol call: its request, the
// number of its turn and the call's id, with a digest of what it asks. A
// turn resumed after a restart repeats the cut turn, with the same turn
// number; an agent that keeps no memory across processes (the demo agent,
// a script started again) makes the same calls again, with the same ids
// (docs/agent-protocol.md: a call id is stable across a resumed turn). A
// call that makes something (a delegated request, a task, an approval or a
// question) records its answer under its key with RecordCallTx, in the
// transaction that makes it; the same call of the resumed turn finds it
// with ReplayCallTx, in the transaction that would make it again, and gets
// the first answer: nothing is done twice.
//
// The zero CallKey is no key: the call is carried out as it comes. An MCP
// call has one only when its caller sends it (MCPCallKey: the runner's
// proxy, which repeats a call cut by a leader's failover); the CLIs resume
// their own session and do not repeat a tool call.
type CallKey struct {
	key     string // <owner>/<request key>/<turn>/<call id>
	call    string // the call's type
	id      string // the call's id
	turn    int
	digest  string // what the call asks: its type and arguments
	resumed bool   // the call comes from a resumed turn: it may repeat one
	mcp     bool   // an MCP call's key (MCPCallKey)
}

// IsZero reports whether k is no key.
func (k CallKey) IsZero() bool { return k.key == "" }

// String names k's call as the audit log does: "ask_agent c2 of turn 1".
func (k CallKey) String() string {
	if k.IsZero() {
		return "(no key)"
	}
	if k.mcp {
		return fmt.Sprintf("%s call %.12s (MCP)", k.call, k.id)
	}
	return fmt.Sprintf("%s %s of turn %d", k.call, k.id, k.turn)
}

// MCPCallKeyHeader carries an MCP call's idempotency key, from the
// runner's MCP proxy to the bridge's /mcp: the proxy derives it from the
// call (the turn's local token, the JSON-RPC id, method and params) and
// sends the same key each time it repeats the call.
const MCPCallKeyHeader = "Roombridge-Call-Key"

// MCPCallKey is the idempotency key of MCP call ev (ev.ID: the key its
// caller sent, MCPCallKeyHeader) of the request whose store key is reqKey.
// It is journaled with the request's calls (and forgotten with them when
// its turn ends), under a digest of ev.ID (the header's length is the
// caller's), and every call under it may be a repeat: a call cut without
// an answer is sent again, with the same key, however the turn goes on.
func MCPCallKey(reqKey string, ev TurnEvent) CallKey {
	k := newCallKey(reqKey, 0, true, ev)
	if k.IsZero() {
		return k
	}
	sum := sha256.Sum256([]byte(ev.ID))
	k.key, k.mcp = reqKey+"/mcp/"+hex.EncodeToString(sum[:16]), true
	return k
}

// maxCallIDKey is the longest call id kept as it is in a journal key;
// a longer one is kept as its digest (store keys are bounded).
const maxCallIDKey = 128

// newCallKey returns the key of call ev of turn number turn of the request
// whose store key is reqKey (zero if ev has no id).
func newCallKey(reqKey string, turn int, resumed bool, ev TurnEvent) CallKey {
	if ev.ID == "" {
		return CallKey{}
	}
	id := ev.ID
	if len(id) > maxCallIDKey {
		sum := sha256.Sum256([]byte(id))
		id = "#" + hex.EncodeToString(sum[:16])
	}
	what := ev
	what.ID = ""
	b, _ := json.Marshal(what)
	sum := sha256.Sum256(b)
	return CallKey{key: fmt.Sprintf("%s/%06d/%s", reqKey, turn, id), call: ev.Type, id: ev.ID, turn: turn,
		digest: hex.EncodeToString(sum[:16]), resumed: resumed}
}

// callRecord is a journaled call: what it asked and its answer.
type callRecord struct {
	Call     string   `json:"call"`
	Digest   string   `json:"digest"`
	Response Response `json:"response"`
}

// ReplayCallTx looks in tx for the answer recorded under key (see CallKey)
// and reports whether the call is a repeat: key comes from a resumed turn,
// and the call it repeats (same turn, same id) asked the same. A repeat is
// audited on request r (call_replayed) in tx, and its first answer returned:
// the caller answers with it and does nothing else. Otherwise (no key, a
// turn not resumed, nothing recorded, or a record of a call that asked
// something else under the same id) the caller carries the call out and
// records its answer with RecordCallTx.
func ReplayCallTx(tx store.Tx, svc *requests.Service, r *requests.Request, key CallKey) (Response, bool, error) {
	if key.IsZero() || !key.resumed {
		return Response{}, false, nil
	}
	var rec callRecord
	err := store.GetJSON(tx, bucketCalls, key.key, &rec)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Response{}, false, nil
	case err != nil:
		return Response{}, false, fmt.Errorf("agents: replay %s %s: %w", key.call, key.id, err)
	case rec.Call != key.call || rec.Digest != key.digest:
		return Response{}, false, nil
	}
	resp := rec.Response
	first := cmp.Or(resp.RequestID, resp.TaskID, resp.Approval, resp.Question)
	err = audit.Append(tx, audit.Record{Time: svc.Clock().Now().UTC(), RequestID: r.ID.String(), Actor: "agent:" + r.Agent,
		Action: "call_replayed", From: r.State.String(), To: r.State.String(),
		Detail: fmt.Sprintf("%s, %s: answered as the first time (%s)", key, repeatedBy(key), first)})
	if err != nil {
		return Response{}, false, err
	}
	return resp, true, nil
}

// repeatedBy says who repeated key's call.
func repeatedBy(key CallKey) string {
	if key.mcp {
		return "sent again (the first was cut before its answer)"
	}
	return "repeated by the resumed turn"
}

// RecordCallTx records resp as the answer of key's call, in tx: the
// transaction that made what the call asked for. A zero key records
// nothing.
func RecordCallTx(tx store.Tx, key CallKey, resp Response) error {
	if key.IsZero() {
		return nil
	}
	return store.PutJSON(tx, bucketCalls, key.key, callRecord{Call: key.call, Digest: key.digest, Response: resp})
}

// forgetCallsTx deletes the journaled calls of request r: its turn has
// ended, and no later turn repeats them.
func forgetCallsTx(tx store.Tx, r *requests.Request) error {
	var keys []string
	p := requestKey(r) + "/"
	if err := tx.Scan(bucketCalls, p, store.PrefixEnd(p), func(k string, _ []byte) error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(bucketCalls, k); err != nil {
			return err
		}
	}
	return nil
}

func (s *Scheduler) taskReader() TaskReader {
	if s.Tasks != nil {
		return s.Tasks
	}
	tr, _ := s.Delegator.(TaskReader)
	return tr
}

// refuse audits a call that was refused and returns its answer.
func (s *Scheduler) refuse(ctx context.Context, id requests.ID, ev TurnEvent, resp Response) Response {
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		r, err := s.svc.GetTx(tx, id)
		if err != nil {
			return err
		}
		return refusedTx(tx, s.svc, r, ev.Type+": "+cmp.Or(resp.Error, resp.Text, "(no reason given)"))
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
// changes. err is a store error. once, when not nil, makes the report
// idempotent in the same transaction: its guard runs first (done: the
// report is applied already, nothing more is written), its record after
// the report is applied.
func (s *Scheduler) progress(ctx context.Context, id requests.ID, percent int, text string, once *reportOnce) (refusal string, err error) {
	text = s.svc.Clip(text)
	err = s.durably(ctx, func() error {
		return s.svc.Store().Update(ctx, func(tx store.Tx) error {
			refusal = ""
			if once != nil {
				if done, err := once.guard(tx); err != nil || done {
					return err
				}
			}
			var err error
			if refusal, err = s.progressTx(tx, id, percent, text); err != nil || refusal != "" || once == nil || once.record == nil {
				return err
			}
			return once.record(tx)
		})
	})
	if err != nil {
		return "", fmt.Errorf("agents: progress of %s: %w", id, err)
	}
	return refusal, nil
}

// reportOnce makes a report idempotent (progress): guard, first in the
// report's transaction, tells whether it is applied already; record, when
// not nil, notes that it is, after it was applied.
type reportOnce struct {
	guard  func(store.Tx) (done bool, err error)
	record func(store.Tx) error
}

// callOnce is the reportOnce of request id's call under key (nil for the
// zero key): a repeat gets the first answer (ReplayCallTx), the first is
// recorded (RecordCallTx).
func (s *Scheduler) callOnce(id requests.ID, key CallKey) *reportOnce {
	if key.IsZero() {
		return nil
	}
	return &reportOnce{
		guard: func(tx store.Tx) (bool, error) {
			r, err := s.svc.GetTx(tx, id)
			if err != nil {
				return false, err
			}
			_, done, err := ReplayCallTx(tx, s.svc, r, key)
			return done, err
		},
		record: func(tx store.Tx) error { return RecordCallTx(tx, key, Response{OK: true}) },
	}
}

// progressTx applies a progress report of request id in tx, or returns
// (and audits) why it is refused.
func (s *Scheduler) progressTx(tx store.Tx, id requests.ID, percent int, text string) (string, error) {
	r, err := s.svc.GetTx(tx, id)
	if err != nil {
		return "", err
	}
	refusal := ""
	switch {
	case percent < 0 || percent > 100:
		refusal = fmt.Sprintf("progress %d is outside 0-100", percent)
	case r.State != requests.Running:
		refusal = fmt.Sprintf("%s is %s, not running", r.ID, r.State)
	}
	if refusal != "" {
		return refusal, refusedTx(tx, s.svc, r, EventProgress+": "+refusal)
	}
	_, err = s.svc.UpdateTx(tx, id, "agent", "", "", func(r *requests.Request) { r.Progress, r.Activity = percent, text })
	return "", err
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
// waits, as after a yield (docs/design.md §3: a turn that ends with "task started"
// is not an answer). Otherwise the text is its answer. Replies of people
// that arrived during the turn do not make it wait: they are reported as
// undelivered, as for any final answer.
func (s *Scheduler) finalOrWait(ctx context.Context, r *requests.Request, final string, got []pendingInput) error {
	waiting, err := s.waiting(ctx, r.ID)
	if err != nil {
		return s.end(ctx, r.ID, requests.Fail, "the turn ended, but what the request waits on could not be read: "+err.Error(), "", got)
	}
	parked, err := s.park(ctx, r, waiting, "on delegated work", final, got, delegatedResult)
	if err != nil || parked {
		return err
	}
	return s.end(ctx, r.ID, requests.Finish, "", final, got)
}

// delegatedResult reports whether in is the result of work the request
// delegated: a task's result or a delegated request's answer.
func delegatedResult(in Input) bool { return in.Kind == InputTaskResult || in.Kind == InputAnswer }
