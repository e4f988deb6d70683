// Package mcptools serves the agent tools (ask_agent, background_run,
// task_status, request_approval, ask_user, report_progress; docs/design.md §3) over
// MCP at /mcp, with the go-sdk's streamable HTTP transport, plus approval_prompt,
// which answers Claude Code's permission prompts with approvals of the
// room. Every HTTP request must carry a per-turn token (Authorization:
// Bearer <token>) issued by Server.Issue for one request; each tool call
// acts on the request its token is bound to, and on no other.
//
// The tools are a transport only: each call is mapped to an agents.TurnEvent
// and carried out by the scheduler's dispatcher (agents.Scheduler.Call),
// the one that serves the exec protocol's calls too, so both transports
// offer the same tools with the same checks, refusals and audit records.
package mcptools

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// BucketTokens holds the per-turn tokens: the SHA-256 of a token (hex) →
// the request it is bound to. A token is deleted when its turn ends.
const BucketTokens = "mcp_tokens"

// Caller carries out an agent's tool call for request id: the dispatcher
// the exec protocol uses too. *agents.Scheduler implements it (it need not
// be running: only the leader runs turns, but any instance may serve /mcp).
type Caller interface {
	Call(ctx context.Context, id requests.ID, ev agents.TurnEvent) agents.Response
}

var _ Caller = (*agents.Scheduler)(nil)

// Options configure a Server. Both Requests and Calls are required.
type Options struct {
	Requests *requests.Service
	Calls    Caller
	Log      *slog.Logger
}

// Server issues per-turn tokens and serves the tools. It is an
// http.Handler (mount it at /mcp).
type Server struct {
	svc   *requests.Service
	calls Caller
	log   *slog.Logger
	mcp   *mcp.Server
	inner http.Handler

	// stop ends every call in flight (Close).
	stop  context.Context
	close context.CancelFunc
}

// tokenRecord is the stored side of a token.
type tokenRecord struct {
	Request requests.ID `json:"request"`
	Issued  time.Time   `json:"issued"`
}

// ErrUnauthorized: the HTTP request carries no token or an unknown one.
var ErrUnauthorized = errors.New("mcptools: missing or unknown per-turn token (Authorization: Bearer <token>)")

var _ agents.ToolIssuer = (*Server)(nil)

// New returns a Server with the tools registered.
func New(o Options) *Server {
	s := &Server{svc: o.Requests, calls: o.Calls, log: o.Log}
	s.stop, s.close = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "roombridge", Version: "1"}, nil)
	s.addTools()
	// Stateless: no MCP session lives in this process's memory (none leaks
	// when an agent never closes its own, and any bridge instance can serve
	// any call); what binds a call to its request is the token, in the store.
	s.inner = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: s.log})
	return s
}

func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Issue records a new token bound to requestID and returns it with the
// func that revokes it (call it when the turn ends; calling it again does
// nothing). Only the token's hash is stored.
func (s *Server) Issue(ctx context.Context, requestID requests.ID) (string, func(), error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("mcptools: issue: %w", err)
	}
	token := "rbt_" + hex.EncodeToString(b[:])
	key := tokenKey(token)
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		if _, err := s.svc.GetTx(tx, requestID); err != nil {
			return err
		}
		return store.PutJSON(tx, BucketTokens, key, tokenRecord{Request: requestID, Issued: s.svc.Clock().Now().UTC()})
	})
	if err != nil {
		return "", nil, fmt.Errorf("mcptools: issue %s: %w", requestID, err)
	}
	revoke := func() {
		// Detached from ctx: the turn's context may already be done.
		err := s.svc.Store().Update(context.Background(), func(tx store.Tx) error { return tx.Delete(BucketTokens, key) })
		if err != nil {
			s.log.Warn("revoking an MCP token", "request_id", requestID.String(), "error", err)
		}
	}
	return token, revoke, nil
}

// Resolve returns the request token is bound to, or ErrUnauthorized.
func (s *Server) Resolve(ctx context.Context, token string) (requests.ID, error) {
	if token == "" {
		return requests.ID{}, ErrUnauthorized
	}
	var rec tokenRecord
	ended := false
	err := s.svc.Store().View(ctx, func(tx store.Tx) error {
		if err := store.GetJSON(tx, BucketTokens, tokenKey(token), &rec); err != nil {
			return err
		}
		r, err := s.svc.GetTx(tx, rec.Request)
		if err != nil {
			return err
		}
		// A token left behind by a turn that never revoked it (the bridge
		// was killed) is dead once its request ended.
		ended = r.State.Terminal()
		return nil
	})
	if errors.Is(err, store.ErrNotFound) || ended {
		return requests.ID{}, ErrUnauthorized
	}
	if err != nil {
		return requests.ID{}, fmt.Errorf("mcptools: resolve token: %w", err)
	}
	return rec.Request, nil
}

func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if t, ok := strings.CutPrefix(v, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// ServeHTTP checks the bearer token of every request before the MCP
// transport sees it: no token or an unknown one is a 401 with a JSON error.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := s.Resolve(r.Context(), bearer(r.Header)); err != nil {
		status := http.StatusUnauthorized
		if !errors.Is(err, ErrUnauthorized) {
			status = http.StatusInternalServerError
		}
		s.log.WarnContext(r.Context(), "mcp request refused", "remote", r.RemoteAddr, "error", err)
		s.auditRefused(r)
		w.Header().Set("Content-Type", "application/json")
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="roombridge-mcp"`)
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	if r.Header.Get(agents.MCPCallKeyHeader) != "" {
		s.serveAgain(w, r)
		return
	}
	s.inner.ServeHTTP(w, r)
}

// serveAgain serves a call whose caller sends it again when it gets no
// answer (it carries an idempotency key: the runner's proxy). A call the
// stop (Close) cut short, or came during it, is answered 503 instead of
// the tool error an agent would take for the call's end: the proxy sends
// it again to the next leader, where its key finds what this one made
// (the delegated request, the open approval). An answer the stop raced is
// dropped too, which the key makes harmless. The answer is JSON (the
// transport's JSONResponse), so it is kept whole and then sent.
func (s *Server) serveAgain(w http.ResponseWriter, r *http.Request) {
	kept := &keptResponse{header: http.Header{}, status: http.StatusOK}
	if s.stop.Err() == nil {
		s.inner.ServeHTTP(kept, r)
	}
	if s.stop.Err() != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": errStopping.Error()})
		return
	}
	maps.Copy(w.Header(), kept.header)
	w.WriteHeader(kept.status)
	_, _ = w.Write(kept.body.Bytes())
}

// keptResponse keeps an answer to send it later (serveAgain).
type keptResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (k *keptResponse) Header() http.Header         { return k.header }
func (k *keptResponse) WriteHeader(status int)      { k.status = status }
func (k *keptResponse) Write(b []byte) (int, error) { return k.body.Write(b) }

// auditRefused records a refused MCP HTTP request.
func (s *Server) auditRefused(r *http.Request) {
	err := s.svc.Store().Update(r.Context(), func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), Actor: "mcp:unauthenticated",
			Action: "auth_refused", Detail: fmt.Sprintf("%s %s from %s", r.Method, r.URL.Path, r.RemoteAddr)})
	})
	if err != nil {
		s.log.ErrorContext(r.Context(), "auditing a refused mcp request", "error", err)
	}
}

// caller resolves the request a tool call acts on, from the token of the
// HTTP request that carried the call (checked again: a token revoked
// mid-session stops working).
func (s *Server) caller(ctx context.Context, req *mcp.CallToolRequest) (requests.ID, error) {
	if req == nil || req.Extra == nil {
		return requests.ID{}, ErrUnauthorized
	}
	return s.Resolve(ctx, bearer(req.Extra.Header))
}

// AskAgentIn is ask_agent's input.
type AskAgentIn struct {
	Agent string `json:"agent" jsonschema:"the agent to ask"`
	Text  string `json:"text" jsonschema:"what to ask it"`
}

// AskAgentOut is ask_agent's output.
type AskAgentOut struct {
	RequestID string `json:"request_id" jsonschema:"the delegated request; its answer comes back in a later turn"`
}

// BackgroundRunIn is background_run's input.
type BackgroundRunIn struct {
	Name    string   `json:"name,omitempty" jsonschema:"a short name for the task"`
	Command []string `json:"command" jsonschema:"the command and its arguments"`
}

// BackgroundRunOut is background_run's output.
type BackgroundRunOut struct {
	TaskID string `json:"task_id"`
}

// TaskStatusIn is task_status's input.
type TaskStatusIn struct {
	TaskID string `json:"task_id"`
}

// TaskStatusOut is task_status's output.
type TaskStatusOut struct {
	TaskID string `json:"task_id"`
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	Output string `json:"output,omitempty"`
}

// RequestApprovalIn is request_approval's input.
type RequestApprovalIn struct {
	Action string `json:"action" jsonschema:"the action the people of the room are asked to approve"`
}

// RequestApprovalOut is request_approval's output.
type RequestApprovalOut struct {
	Approved bool   `json:"approved"`
	Answer   string `json:"answer"`
	Approval string `json:"approval,omitempty" jsonschema:"the approval opened (people decide it by this ID)"`
}

// AskUserIn is ask_user's input.
type AskUserIn struct {
	Text string `json:"text" jsonschema:"the question for the people of the room"`
}

// AskUserOut is ask_user's output.
type AskUserOut struct {
	Answered bool   `json:"answered"`
	Answer   string `json:"answer" jsonschema:"the person's answer, or why there is none (expired, withdrawn)"`
	Question string `json:"question,omitempty" jsonschema:"the question's ID (R…-08.q1)"`
	From     string `json:"from,omitempty" jsonschema:"who answered (surface:user)"`
}

// ReportProgressIn is report_progress's input.
type ReportProgressIn struct {
	Percent int    `json:"percent" jsonschema:"progress, 0-100"`
	Text    string `json:"text,omitempty" jsonschema:"what the agent is doing"`
}

// ReportProgressOut is report_progress's output.
type ReportProgressOut struct {
	OK bool `json:"ok"`
}

// ApprovalPromptIn is what Claude Code sends its --permission-prompt-tool.
type ApprovalPromptIn struct {
	ToolName  string         `json:"tool_name" jsonschema:"the tool that asks for permission"`
	Input     map[string]any `json:"input,omitempty" jsonschema:"the tool's input"`
	ToolUseID string         `json:"tool_use_id,omitempty"`
}

// ApprovalPromptAnswer is approval_prompt's answer, as JSON in a text
// content (what Claude Code reads): {"behavior":"allow","updatedInput":…}
// or {"behavior":"deny","message":"…"}.
type ApprovalPromptAnswer struct {
	Behavior     string         `json:"behavior"`
	UpdatedInput map[string]any `json:"updatedInput,omitempty"`
	Message      string         `json:"message,omitempty"`
}

// maxAction bounds the input shown in an approval_prompt's approval.
const maxAction = 1000

// errStopping answers the calls that Close ended or refused.
var errStopping = errors.New("mcptools: the bridge is stopping: call again once it is back (what you asked for is kept)")

// Close ends the calls in flight and every later one at once: the bridge
// is stopping. A call may wait for people for hours (request_approval,
// approval_prompt, ask_user) on its HTTP request's context, which an HTTP
// server's shutdown waits for instead of ending. The approval or question
// stays in the store: the resumed turn asks again and gets it.
func (s *Server) Close() { s.close() }

// call carries out ev for the request the call's token is bound to, until
// the call's HTTP request or the Server (Close) ends. A call that carries
// an idempotency key (agents.MCPCallKeyHeader) is done once however often
// it comes (agents.Scheduler.Call).
func (s *Server) call(ctx context.Context, req *mcp.CallToolRequest, ev agents.TurnEvent) (agents.Response, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.stop, cancel)()
	if s.stop.Err() != nil {
		return agents.Response{}, errStopping
	}
	id, err := s.caller(ctx, req)
	if err != nil {
		return agents.Response{}, err
	}
	// The call's idempotency key, when its caller repeats a call cut
	// without an answer (the runner's proxy): the call is done once.
	ev.ID = req.Extra.Header.Get(agents.MCPCallKeyHeader)
	resp := s.calls.Call(ctx, id, ev)
	if s.stop.Err() != nil && ctx.Err() != nil {
		// Cut short by the stop: not an answer (a wait for people ended
		// by it is no denial).
		return agents.Response{}, errStopping
	}
	return resp, nil
}

// do is call for the tools whose failed call is a tool error.
func (s *Server) do(ctx context.Context, req *mcp.CallToolRequest, ev agents.TurnEvent) (agents.Response, error) {
	resp, err := s.call(ctx, req, ev)
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	return resp, err
}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "ask_agent", Description: "Ask another agent of the room; its answer comes back in a later turn. End your turn after asking."},
		func(ctx context.Context, req *mcp.CallToolRequest, in AskAgentIn) (*mcp.CallToolResult, AskAgentOut, error) {
			resp, err := s.do(ctx, req, agents.TurnEvent{Type: agents.EventAskAgent, Agent: in.Agent, Text: in.Text})
			return nil, AskAgentOut{RequestID: resp.RequestID}, err
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "background_run", Description: "Start a background command; returns a task ID at once. Its result wakes you in a later turn: end your turn when you have nothing else to do."},
		func(ctx context.Context, req *mcp.CallToolRequest, in BackgroundRunIn) (*mcp.CallToolResult, BackgroundRunOut, error) {
			resp, err := s.do(ctx, req, agents.TurnEvent{Type: agents.EventBackgroundRun, Name: in.Name, Command: in.Command})
			return nil, BackgroundRunOut{TaskID: resp.TaskID}, err
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "task_status", Description: "The state of a background task started by this request."},
		func(ctx context.Context, req *mcp.CallToolRequest, in TaskStatusIn) (*mcp.CallToolResult, TaskStatusOut, error) {
			resp, err := s.do(ctx, req, agents.TurnEvent{Type: agents.EventTaskStatus, TaskID: in.TaskID})
			if err != nil || resp.Task == nil {
				return nil, TaskStatusOut{}, err
			}
			t := resp.Task
			return nil, TaskStatusOut{TaskID: t.ID, Name: t.Name, State: t.State, Reason: t.Reason, Output: t.Output}, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "request_approval", Description: "Ask the people of the room to approve an action; blocks until they decide or the approval expires."},
		func(ctx context.Context, req *mcp.CallToolRequest, in RequestApprovalIn) (*mcp.CallToolResult, RequestApprovalOut, error) {
			// Not approved, for whatever reason, is an answer, not an error.
			resp, err := s.call(ctx, req, agents.TurnEvent{Type: agents.EventRequestApproval, Action: in.Action})
			return nil, RequestApprovalOut{Approved: resp.OK, Answer: resp.Text, Approval: resp.Approval}, err
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "ask_user", Description: "Ask the people of the room a question; it is shown in the request's thread (and in the thread of the conversation that delegated the work) and blocks until someone answers or it expires."},
		func(ctx context.Context, req *mcp.CallToolRequest, in AskUserIn) (*mcp.CallToolResult, AskUserOut, error) {
			// No answer (expired, withdrawn) is an answer, not an error.
			resp, err := s.call(ctx, req, agents.TurnEvent{Type: agents.EventAskUser, Text: in.Text})
			return nil, AskUserOut{Answered: resp.OK, Answer: resp.Text, Question: resp.Question, From: resp.From}, err
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "report_progress", Description: "Report progress (0-100) and what you are doing; shown in the request's thread status."},
		func(ctx context.Context, req *mcp.CallToolRequest, in ReportProgressIn) (*mcp.CallToolResult, ReportProgressOut, error) {
			resp, err := s.do(ctx, req, agents.TurnEvent{Type: agents.EventProgress, Percent: in.Percent, Text: in.Text})
			return nil, ReportProgressOut{OK: resp.OK}, err
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "approval_prompt", Description: "Claude Code's permission prompt (--permission-prompt-tool): asks the people of the room, as request_approval does."},
		func(ctx context.Context, req *mcp.CallToolRequest, in ApprovalPromptIn) (*mcp.CallToolResult, any, error) {
			resp, err := s.call(ctx, req, agents.TurnEvent{Type: agents.EventRequestApproval, Action: promptAction(in)})
			if err != nil {
				return nil, nil, err
			}
			ans := ApprovalPromptAnswer{Behavior: "deny", Message: firstNonEmpty(resp.Text, resp.Error, "not approved")}
			if resp.OK {
				ans = ApprovalPromptAnswer{Behavior: "allow", UpdatedInput: in.Input}
				if ans.UpdatedInput == nil {
					ans.UpdatedInput = map[string]any{}
				}
			}
			b, err := json.Marshal(ans)
			if err != nil {
				return nil, nil, fmt.Errorf("mcptools: approval_prompt: %w", err)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
		})
}

// promptAction is the action people approve for a permission prompt: the
// tool and its input ("use Bash: {"command":"make deploy"}"), cut at
// maxAction bytes.
func promptAction(in ApprovalPromptIn) string {
	action := "use " + firstNonEmpty(in.ToolName, "an unnamed tool")
	if len(in.Input) > 0 {
		b, err := json.Marshal(in.Input)
		if err == nil {
			action += ": " + string(b)
		}
	}
	return clip.Text(action, maxAction, clip.Bytes)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// TaskLister lists an owner's background tasks. *delegation.Service
// implements it.
type TaskLister interface {
	Tasks(ctx context.Context, owner string) ([]delegation.Task, error)
}

var _ TaskLister = (*delegation.Service)(nil)

// Tasks answers task_status (agents.TaskReader; set it as the scheduler's
// Tasks) from the delegation service's tasks: a request sees the tasks it
// started, and no others.
type Tasks struct {
	Requests   *requests.Service
	Delegation TaskLister
}

var _ agents.TaskReader = Tasks{}

// TaskStatus implements agents.TaskReader.
func (t Tasks) TaskStatus(ctx context.Context, from requests.ID, taskID string) (agents.TaskInfo, error) {
	r, err := t.Requests.Get(ctx, from)
	if err != nil {
		return agents.TaskInfo{}, fmt.Errorf("task_status: %w", err)
	}
	ts, err := t.Delegation.Tasks(ctx, r.Owner)
	if err != nil {
		return agents.TaskInfo{}, fmt.Errorf("task_status: %w", err)
	}
	for _, x := range ts {
		if x.ID == taskID && x.Request == from {
			return agents.TaskInfo{ID: x.ID, Name: x.Name, State: x.State, Reason: x.Reason, Output: x.Output}, nil
		}
	}
	return agents.TaskInfo{}, fmt.Errorf("%s started no task %q", from, taskID)
}

// URL is the address of the MCP endpoint that agents on this host use,
// given the scheme of the bridge's HTTP server ("http", or "https" with
// TLS) and the address it listens on (after net.Listen: the real port):
// an unspecified host (0.0.0.0, ::) becomes the loopback address.
func URL(scheme, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return scheme + "://" + addr + "/mcp"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/mcp"
}
