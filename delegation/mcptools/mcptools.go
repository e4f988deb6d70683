// Package mcptools serves the agent tools (ask_agent, background_run,
// task_status, request_approval, report_progress; DESIGN §3) over MCP at
// /mcp, with the go-sdk's streamable HTTP transport. Every HTTP request must
// carry a per-turn token (Authorization: Bearer <token>) issued by
// Server.Issue for one request; each tool call acts on the request its
// token is bound to, and on no other.
package mcptools

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roombridge/roombridge/agents"
	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// BucketTokens holds the per-turn tokens: the SHA-256 of a token (hex) →
// the request it is bound to. A token is deleted when its turn ends.
const BucketTokens = "mcp_tokens"

// Delegator is what the tools need of the delegation service.
type Delegator interface {
	AskAgent(ctx context.Context, from requests.ID, agent, text string) (requests.ID, error)
	BackgroundRun(ctx context.Context, from requests.ID, run agents.BackgroundRun) (string, error)
	Tasks(ctx context.Context, owner string) ([]delegation.Task, error)
}

// Approver is what request_approval needs of the approvals service.
type Approver interface {
	RequestApproval(ctx context.Context, requestID, action string) (approvals.Decision, error)
}

var (
	_ Delegator = (*delegation.Service)(nil)
	_ Approver  = (*approvals.Service)(nil)
)

// Options configure a Server. Requests and Delegator are required;
// without Approver, request_approval answers "not approved".
type Options struct {
	Requests  *requests.Service
	Delegator Delegator
	Approver  Approver
	Log       *slog.Logger
}

// Server issues per-turn tokens and serves the tools. It is an
// http.Handler (mount it at /mcp).
type Server struct {
	svc   *requests.Service
	del   Delegator
	appr  Approver
	log   *slog.Logger
	mcp   *mcp.Server
	inner http.Handler
}

// tokenRecord is the stored side of a token.
type tokenRecord struct {
	Request requests.ID `json:"request"`
	Issued  time.Time   `json:"issued"`
}

// ErrUnauthorized: the HTTP request carries no token or an unknown one.
var ErrUnauthorized = errors.New("mcptools: missing or unknown per-turn token (Authorization: Bearer <token>)")

// New returns a Server with the five tools registered.
func New(o Options) *Server {
	s := &Server{svc: o.Requests, del: o.Delegator, appr: o.Approver, log: o.Log}
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
	s.inner.ServeHTTP(w, r)
}

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

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "ask_agent", Description: "Ask another agent of the room; its answer comes back in a later turn. End your turn after asking."},
		func(ctx context.Context, req *mcp.CallToolRequest, in AskAgentIn) (*mcp.CallToolResult, AskAgentOut, error) {
			id, err := s.caller(ctx, req)
			if err != nil {
				return nil, AskAgentOut{}, err
			}
			rb, err := s.del.AskAgent(ctx, id, in.Agent, in.Text)
			if err != nil {
				return nil, AskAgentOut{}, err
			}
			return nil, AskAgentOut{RequestID: rb.String()}, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "background_run", Description: "Start a background command; returns a task ID at once. Its result wakes you in a later turn."},
		func(ctx context.Context, req *mcp.CallToolRequest, in BackgroundRunIn) (*mcp.CallToolResult, BackgroundRunOut, error) {
			id, err := s.caller(ctx, req)
			if err != nil {
				return nil, BackgroundRunOut{}, err
			}
			task, err := s.del.BackgroundRun(ctx, id, agents.BackgroundRun{Name: in.Name, Command: in.Command})
			if err != nil {
				return nil, BackgroundRunOut{}, err
			}
			return nil, BackgroundRunOut{TaskID: task}, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "task_status", Description: "The state of a background task started by this request."},
		func(ctx context.Context, req *mcp.CallToolRequest, in TaskStatusIn) (*mcp.CallToolResult, TaskStatusOut, error) {
			id, err := s.caller(ctx, req)
			if err != nil {
				return nil, TaskStatusOut{}, err
			}
			t, err := s.taskOf(ctx, id, in.TaskID)
			if err != nil {
				return nil, TaskStatusOut{}, err
			}
			return nil, TaskStatusOut{TaskID: t.ID, Name: t.Name, State: t.State, Reason: t.Reason, Output: t.Output}, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "request_approval", Description: "Ask the people of the room to approve an action; blocks until they decide or the approval expires."},
		func(ctx context.Context, req *mcp.CallToolRequest, in RequestApprovalIn) (*mcp.CallToolResult, RequestApprovalOut, error) {
			id, err := s.caller(ctx, req)
			if err != nil {
				return nil, RequestApprovalOut{}, err
			}
			if s.appr == nil {
				return nil, RequestApprovalOut{Answer: "not approved: no approver configured"}, nil
			}
			d, err := s.appr.RequestApproval(ctx, id.String(), in.Action)
			if err != nil {
				return nil, RequestApprovalOut{}, err
			}
			return nil, RequestApprovalOut{Approved: d.Approved(), Answer: d.Answer()}, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "report_progress", Description: "Report progress (0-100) and what you are doing; shown in the request's thread status."},
		func(ctx context.Context, req *mcp.CallToolRequest, in ReportProgressIn) (*mcp.CallToolResult, ReportProgressOut, error) {
			id, err := s.caller(ctx, req)
			if err != nil {
				return nil, ReportProgressOut{}, err
			}
			if err := s.progress(ctx, id, in.Percent, in.Text); err != nil {
				return nil, ReportProgressOut{}, err
			}
			return nil, ReportProgressOut{OK: true}, nil
		})
}

// taskOf returns task taskID if request id started it; a task of another
// request is reported as unknown.
func (s *Server) taskOf(ctx context.Context, id requests.ID, taskID string) (*delegation.Task, error) {
	r, err := s.svc.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("mcptools: task_status: %w", err)
	}
	ts, err := s.del.Tasks(ctx, r.Owner)
	if err != nil {
		return nil, fmt.Errorf("mcptools: task_status: %w", err)
	}
	for i := range ts {
		if ts[i].ID == taskID && ts[i].Request == id {
			return &ts[i], nil
		}
	}
	return nil, fmt.Errorf("mcptools: task_status: %s started no task %q", id, taskID)
}

// progress records a progress report on running request id; bad input is
// refused with an audit record and changes nothing.
func (s *Server) progress(ctx context.Context, id requests.ID, percent int, text string) error {
	var refusal string
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
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
			return audit.Append(tx, audit.Record{Time: s.svc.Clock().Now().UTC(), RequestID: id.String(),
				Actor: "agent:" + r.Agent, Action: "call_refused", From: r.State.String(), To: r.State.String(),
				Detail: "report_progress: " + refusal})
		}
		_, err = s.svc.UpdateTx(tx, id, "agent", "", "", func(r *requests.Request) { r.Progress, r.Activity = percent, text })
		return err
	})
	if err == nil && refusal != "" {
		err = errors.New(refusal)
	}
	if err != nil {
		return fmt.Errorf("mcptools: report_progress: %w", err)
	}
	return nil
}
