// Package httpapi serves the bridge's HTTP API (requests, audit), health,
// readiness and metrics, and mounts the platform webhooks and the MCP
// endpoint.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store"
)

// MaxBody bounds request bodies.
const MaxBody = 1 << 20

// APIActor is how callers holding the API token appear in the audit log.
const APIActor = chat.API + ":token"

// Server is the HTTP API.
type Server struct {
	svc    *requests.Service
	router *rooms.Router
	token  string
	ready  func() bool
	log    *slog.Logger
	mux    *http.ServeMux
	tasks  Tasks
}

// Tasks are the background tasks the API lists, stops and dismisses
// (delegation).
type Tasks interface {
	Running(ctx context.Context, room string) ([]delegation.Task, error)
	StopTask(ctx context.Context, id, actor, surface string) (*delegation.Task, error)
	DismissTask(ctx context.Context, id, actor, surface string) (*delegation.Task, error)
}

// Options configure a Server.
type Options struct {
	Service *requests.Service
	Router  *rooms.Router
	// Token is the bearer token /v1 requires.
	Token string
	// Ready reports readiness for /readyz (nil: always ready).
	Ready    func() bool
	Log      *slog.Logger
	Registry *prometheus.Registry
	// Tasks, if set, adds background tasks to a room's tasks and serves
	// POST /v1/tasks/{id}/stop and POST /v1/tasks/{id}/dismiss.
	Tasks Tasks
}

// New returns a Server.
func New(o Options) *Server {
	s := &Server{svc: o.Service, router: o.Router, token: o.Token, ready: o.Ready, log: o.Log, mux: http.NewServeMux(), tasks: o.Tasks}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.ready != nil && !s.ready() {
			writeError(w, http.StatusServiceUnavailable, "not ready: this instance is not the leader")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.handle("GET /v1/requests", s.listRequests)
	s.handle("POST /v1/requests", s.createRequest)
	s.handle("GET /v1/requests/{id}", s.getRequest)
	s.handle("POST /v1/requests/{id}/cancel", s.cancelRequest)
	s.handle("POST /v1/requests/{id}/retry", s.retryRequest)
	s.handle("POST /v1/approvals/{id}/approve", s.decide(approvals.Approve))
	s.handle("POST /v1/approvals/{id}/deny", s.decide(approvals.Deny))
	s.handle("POST /v1/questions/{id}/answer", s.answerQuestion)
	s.handle("POST /v1/users/{user}/revoke", s.revokeUser)
	s.handle("GET /v1/rooms/{room}/inbox", s.roomInbox)
	s.handle("GET /v1/rooms/{room}/tasks", s.roomTasks)
	s.handle("POST /v1/tasks/{id}/stop", s.taskCommand(Tasks.StopTask))
	s.handle("POST /v1/tasks/{id}/dismiss", s.taskCommand(Tasks.DismissTask))
	s.handle("GET /v1/audit", s.exportAudit)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Mount adds a handler (webhooks, /mcp) that does its own authentication.
func (s *Server) Mount(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handle adds an /v1 handler behind the bearer token.
func (s *Server) Handle(pattern string, h http.HandlerFunc) { s.handle(pattern, h) }

func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.refuseAuth(r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="roombridge"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong API token (Authorization: Bearer <token>)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		h(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) == 1
}

// refuseAuth audits a refused call (no state changes).
func (s *Server) refuseAuth(r *http.Request) {
	err := s.svc.Store().Update(r.Context(), func(tx store.Tx) error {
		return audit.Append(tx, audit.Record{
			Time: s.svc.Clock().Now(), Actor: "api:unauthenticated", Surface: chat.API, Action: "auth_refused",
			Detail: fmt.Sprintf("%s %s from %s", r.Method, r.URL.Path, r.RemoteAddr),
		})
	})
	if err != nil {
		s.log.ErrorContext(r.Context(), "auditing refused call", "error", err)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// fail maps a domain error to its HTTP status.
func fail(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, requests.ErrBadID), errors.Is(err, approvals.ErrBadID), errors.Is(err, approvals.ErrBadUser),
		errors.Is(err, approvals.ErrBadAnswer):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, requests.ErrUnknown), errors.Is(err, approvals.ErrUnknown), errors.Is(err, approvals.ErrUnknownRoom):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, delegation.ErrNoTask):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, approvals.ErrDecided), errors.Is(err, delegation.ErrTaskEnded), errors.Is(err, delegation.ErrTaskRunning):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, rooms.ErrForbidden):
		writeError(w, http.StatusForbidden, err.Error())
	case errors.Is(err, requests.ErrIllegalTransition):
		writeError(w, http.StatusConflict, err.Error())
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit))
	case errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, store.ErrFenced): // HA: a follower; ask the leader (the one /readyz calls ready)
		writeError(w, http.StatusServiceUnavailable, "not the leader: "+err.Error())
	default:
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	}
}

func (s *Server) pathID(r *http.Request) (requests.ID, error) {
	return requests.ParseRef(r.PathValue("id"), s.svc.Clock().Now())
}

func (s *Server) listRequests(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := requests.Filter{Agent: q.Get("agent")}
	if st := q.Get("state"); st != "" {
		state, err := requests.ParseState(st)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		f.State = state
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "limit: want a non-negative number")
			return
		}
		f.Limit = n
	}
	list, err := s.svc.List(r.Context(), f)
	if err != nil {
		fail(w, err)
		return
	}
	if list == nil {
		list = []*requests.Request{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"requests": list, "count": len(list)})
}

func (s *Server) getRequest(w http.ResponseWriter, r *http.Request) {
	id, err := s.pathID(r)
	if err != nil {
		fail(w, err)
		return
	}
	req, err := s.svc.Get(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, req)
}

// decodeBody decodes r's JSON body into v, refusing unknown fields. On
// failure it has answered (413 over MaxBody, else 400 with the parse error
// and hint) and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, hint string) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		fail(w, err)
	} else {
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error()+hint)
	}
	return false
}

// CreateBody is the body of POST /v1/requests.
type CreateBody struct {
	Room  string `json:"room"`
	Agent string `json:"agent"`
	Text  string `json:"text"`
}

func (s *Server) createRequest(w http.ResponseWriter, r *http.Request) {
	var b CreateBody
	if !decodeBody(w, r, &b, "") {
		return
	}
	room, ok := s.router.RoomNamed(b.Room)
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("room: unknown room %q", b.Room))
		return
	}
	if b.Agent == "" {
		b.Agent = room.Agents[0]
	}
	if !contains(room.Agents, b.Agent) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("agent: %q is not an agent of room %s", b.Agent, room.Name))
		return
	}
	if strings.TrimSpace(b.Text) == "" {
		writeError(w, http.StatusBadRequest, "text: required")
		return
	}
	req, err := s.svc.Create(r.Context(), requests.Ask{Agent: b.Agent, Room: room.Name, Surface: chat.API, User: APIActor, Text: b.Text, Approved: true})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, req)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (s *Server) cancelRequest(w http.ResponseWriter, r *http.Request) {
	id, err := s.pathID(r)
	if err != nil {
		fail(w, err)
		return
	}
	req, err := s.router.Cancel(r.Context(), id, APIActor, chat.API)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, req)
}

func (s *Server) retryRequest(w http.ResponseWriter, r *http.Request) {
	id, err := s.pathID(r)
	if err != nil {
		fail(w, err)
		return
	}
	req, err := s.router.Retry(r.Context(), id, APIActor, chat.API)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, req)
}

// decide approves or denies an approval (R-07: a request's: a
// permission asked during its run) as the API token holder.
func (s *Server) decide(v approvals.Verdict) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, err := s.router.Decide(r.Context(), r.PathValue("id"), v == approvals.Approve, APIActor, chat.API)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, a)
	}
}

// AnswerBody is the body of POST /v1/questions/{id}/answer.
type AnswerBody struct {
	Text string `json:"text"`
}

// answerQuestion answers a question an agent asked (ask_user; R-08.q1) as
// the API token holder: 200 with the answered question, 404 for an unknown
// one, 409 naming who answered (or that it expired) for a settled one.
func (s *Server) answerQuestion(w http.ResponseWriter, r *http.Request) {
	var b AnswerBody
	if !decodeBody(w, r, &b, ` (want {"text": "..."})`) {
		return
	}
	q, err := s.router.Answer(r.Context(), r.PathValue("id"), b.Text, APIActor, chat.API)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, q)
}

// RevokeResult is the answer of POST /v1/users/{user}/revoke.
type RevokeResult struct {
	User string `json:"user"`
	// Cancelled are the user's pending and queued requests, now cancelled;
	// their running requests finish.
	Cancelled []requests.ID `json:"cancelled"`
	Count     int           `json:"count"`
}

func (s *Server) revokeUser(w http.ResponseWriter, r *http.Request) {
	user := r.PathValue("user")
	ids, err := s.router.Approvals().Revoke(r.Context(), user, APIActor, chat.API)
	if err != nil {
		fail(w, err)
		return
	}
	if ids == nil {
		ids = []requests.ID{}
	}
	writeJSON(w, http.StatusOK, RevokeResult{User: user, Cancelled: ids, Count: len(ids)})
}

func (s *Server) roomInbox(w http.ResponseWriter, r *http.Request) {
	in, err := s.router.Approvals().Inbox(r.Context(), r.PathValue("room"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// Task is one thing in a room's tasks: a running request, or a background
// task (started by request RequestID) that runs, or that failed or was
// interrupted and is not dismissed yet (State, Reason, EndedAt say so).
type Task struct {
	Kind    string   `json:"kind"` // "request" or "task"
	TaskID  string   `json:"task_id,omitempty"`
	Name    string   `json:"name,omitempty"`
	Command []string `json:"command,omitempty"`
	// RunAgent, Text and Run: a background agent run's agent, ask and
	// request.
	RunAgent        string      `json:"run_agent,omitempty"`
	Text            string      `json:"text,omitempty"`
	Run             requests.ID `json:"run,omitzero"`
	State           string      `json:"state,omitempty"`
	Reason          string      `json:"reason,omitempty"`
	EndedAt         time.Time   `json:"ended_at,omitzero"`
	RequestID       requests.ID `json:"request_id"`
	Agent           string      `json:"agent"`
	Requester       string      `json:"requester,omitempty"`
	StartedAt       time.Time   `json:"started_at"`
	Progress        int         `json:"progress,omitempty"`
	Activity        string      `json:"activity,omitempty"`
	CancelRequested bool        `json:"cancel_requested,omitempty"`
}

func (s *Server) roomTasks(w http.ResponseWriter, r *http.Request) {
	room, ok := s.router.RoomNamed(r.PathValue("room"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown room %q", r.PathValue("room")))
		return
	}
	running, err := s.svc.List(r.Context(), requests.Filter{State: requests.Running})
	if err != nil {
		fail(w, err)
		return
	}
	tasks := []Task{}
	for _, q := range running {
		if q.Room == room.Name {
			tasks = append(tasks, Task{Kind: "request", RequestID: q.ID, Agent: q.Agent, Requester: q.Requester,
				StartedAt: q.StartedAt, Progress: q.Progress, Activity: q.Activity, CancelRequested: q.CancelRequested})
		}
	}
	if s.tasks != nil {
		bg, err := s.tasks.Running(r.Context(), room.Name)
		if err != nil {
			fail(w, err)
			return
		}
		for _, t := range bg {
			tasks = append(tasks, Task{Kind: "task", TaskID: t.ID, Name: t.Name, Command: t.Command,
				RunAgent: t.RunAgent, Text: t.Text, Run: t.Run, State: t.State, Reason: t.Reason, EndedAt: t.Ended,
				RequestID: t.Request, Agent: t.Agent, StartedAt: t.Started})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"room": room.Name, "tasks": tasks, "count": len(tasks)})
}

// taskCommand serves a command on background task {id} (stop, dismiss) as
// the API token holder: an unknown task is 404, a task in the wrong state
// 409.
func (s *Server) taskCommand(do func(Tasks, context.Context, string, string, string) (*delegation.Task, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.tasks == nil {
			writeError(w, http.StatusNotImplemented, "background tasks are not available")
			return
		}
		t, err := do(s.tasks, r.Context(), r.PathValue("id"), APIActor, chat.API)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, t)
	}
}

// ParseTime accepts RFC 3339 times and YYYY-MM-DD days (UTC).
func ParseTime(key, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: %q is not a time (want RFC 3339 or YYYY-MM-DD)", key, v)
}

func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := ParseTime("since", q.Get("since"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	until, err := ParseTime("until", q.Get("until"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	format, err := audit.ParseFormat(q.Get("format"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "format: "+err.Error())
		return
	}
	query := audit.Query{Since: since, Until: until}
	if rid := q.Get("request"); rid != "" {
		id, err := requests.ParseRef(rid, s.svc.Clock().Now())
		if err != nil {
			fail(w, err)
			return
		}
		query.RequestID = id.String()
	}
	if format == audit.CSV {
		w.Header().Set("Content-Type", "text/csv")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	if n, err := audit.Count(r.Context(), s.svc.Store()); err == nil {
		w.Header().Set("X-Audit-Total", strconv.FormatUint(n, 10))
	}
	if _, err := audit.Export(r.Context(), s.svc.Store(), query, format, w, nil); err != nil {
		s.log.ErrorContext(r.Context(), "audit export failed mid-stream", "error", err)
	}
}
