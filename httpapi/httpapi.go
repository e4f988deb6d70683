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
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/internal/clip"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
)

// MaxBody bounds request bodies.
const MaxBody = 1 << 20

// ReadWait bounds how long a read of /v1 waits for the store: past it the
// caller gets a 503 saying the store is unreachable (etcd without quorum)
// instead of waiting for the store's own, longer, timeouts.
const ReadWait = 3 * time.Second

// MaxPathAudited is how much of a refused call's URL path its audit record
// keeps.
const MaxPathAudited = 64

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
	// refusals bounds the auth_refused records (rooms.RefusalsPerWindow).
	refusals     rooms.Refusals
	writeTimeout time.Duration
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
	Ready func() bool
	// Detail, if set, is added to /readyz's answer as "detail": this
	// instance (version, store format) and, in HA, the leader.
	Detail   func(ctx context.Context) any
	Log      *slog.Logger
	Registry *prometheus.Registry
	// Tasks, if set, adds background tasks to a room's tasks and serves
	// POST /v1/tasks/{id}/stop and POST /v1/tasks/{id}/dismiss.
	Tasks Tasks
	// WriteTimeout is the server's (ServerOptions.WriteTimeout): streaming
	// responses (the audit export, MountStream) extend it before each write.
	WriteTimeout time.Duration
}

// New returns a Server.
func New(o Options) *Server {
	s := &Server{svc: o.Service, router: o.Router, token: o.Token, ready: o.Ready, log: o.Log, mux: http.NewServeMux(), tasks: o.Tasks,
		writeTimeout: o.WriteTimeout}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		status, body := http.StatusOK, map[string]any{"status": "ready"}
		if s.ready != nil && !s.ready() {
			status, body = http.StatusServiceUnavailable, map[string]any{"error": "not ready: this instance is not the leader"}
		}
		if o.Detail != nil {
			body["detail"] = o.Detail(r.Context())
		}
		writeJSON(w, status, body)
	})
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// A store that cannot be read leaves its gauges out of the answer (and
	// logs why); the rest is served, never a 500.
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
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
	// The export streams: its first read is bounded (ReadWait), then not.
	s.handleWait("GET /v1/audit", Stream(http.HandlerFunc(s.exportAudit), o.WriteTimeout).ServeHTTP, 0)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Mount adds a handler (webhooks, /mcp) that does its own authentication.
func (s *Server) Mount(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// MountStream is Mount for a handler whose responses stream (/mcp): it
// extends the server's write timeout before each write (Stream).
func (s *Server) MountStream(pattern string, h http.Handler) {
	s.mux.Handle(pattern, Stream(h, s.writeTimeout))
}

// Handle adds an /v1 handler behind the bearer token.
func (s *Server) Handle(pattern string, h http.HandlerFunc) { s.handle(pattern, h) }

func (s *Server) handle(pattern string, h http.HandlerFunc) { s.handleWait(pattern, h, ReadWait) }

// HandleStream adds a /v1 handler behind the bearer token whose answer,
// of type contentType, write streams for as long as it takes (a backup): no
// read wait, the write timeout extended before each write. An error before
// anything was sent is answered as every error of the API (a failure of
// ours a 5xx, with a reference into the log); after, the stream is cut, so
// that the caller sees it end early.
func (s *Server) HandleStream(pattern, contentType string, write func(ctx context.Context, w io.Writer) error) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		sent := &sentWriter{w: w}
		err := write(r.Context(), sent)
		switch {
		case err == nil:
		case sent.n == 0:
			w.Header().Del("Content-Type")
			s.fail(w, r, err)
		default:
			s.log.ErrorContext(r.Context(), "api stream failed; cutting it", "path", clipPath(r.URL.Path), "sent", sent.n, "error", err)
			panic(http.ErrAbortHandler)
		}
	}
	s.handleWait(pattern, Stream(http.HandlerFunc(h), s.writeTimeout).ServeHTTP, 0)
}

// handleWait is handle with reads (GET) bounded by wait (0: not bounded).
func (s *Server) handleWait(pattern string, h http.HandlerFunc, wait time.Duration) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.refuseAuth(r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="roombridge"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong API token (Authorization: Bearer <token>)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		if r.Method == http.MethodGet && wait > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) == 1
}

// refuseAuth logs a refused call and audits it at a bounded rate (the
// webhook refusals' bound, per reason), keeping a short prefix of its path:
// no state changes, and a flood cannot fill the store.
func (s *Server) refuseAuth(r *http.Request) {
	reason := "wrong token"
	if r.Header.Get("Authorization") == "" {
		reason = "no token"
	}
	detail := fmt.Sprintf("%s: %s %s from %s", reason, r.Method, clipPath(r.URL.Path), r.RemoteAddr)
	s.log.WarnContext(r.Context(), "api call refused", "reason", reason, "method", r.Method, "path", clipPath(r.URL.Path), "client", r.RemoteAddr)
	err := s.refusals.Audit(r.Context(), s.svc.Store(), "api\x00"+reason, audit.Record{Time: s.svc.Clock().Now(),
		Actor: "api:unauthenticated", Surface: chat.API, Action: "auth_refused", Detail: detail})
	if err != nil {
		s.log.ErrorContext(r.Context(), "auditing refused call", "error", err)
	}
}

// clipPath is at most MaxPathAudited bytes of p, for logs and audit records.
func clipPath(p string) string { return clip.Line(p, MaxPathAudited, clip.Bytes) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (s *Server) pathID(r *http.Request) (requests.ID, error) {
	return requests.ParseRef(r.PathValue("id"), s.svc.Clock().Now())
}

func (s *Server) getRequest(w http.ResponseWriter, r *http.Request) {
	id, err := s.pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, err := s.svc.Get(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, req)
}

// decodeBody decodes r's JSON body, one value and nothing after it, into
// v, refusing unknown fields. On failure it has answered (413 over MaxBody,
// else 400 with the parse error and hint) and returns false.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, hint string) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return true
		}
		if err == nil {
			err = errors.New("data after the JSON value (send one value)")
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		s.fail(w, r, err)
	} else {
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error()+hint)
	}
	return false
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
		s.fail(w, r, err)
		return
	}
	req, err := s.router.Cancel(r.Context(), id, APIActor, chat.API)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, req)
}

func (s *Server) retryRequest(w http.ResponseWriter, r *http.Request) {
	id, err := s.pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, err := s.router.Retry(r.Context(), id, APIActor, chat.API)
	if err != nil {
		s.fail(w, r, err)
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
			s.fail(w, r, err)
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
	if !s.decodeBody(w, r, &b, ` (want {"text": "..."})`) {
		return
	}
	q, err := s.router.Answer(r.Context(), r.PathValue("id"), b.Text, APIActor, chat.API)
	if err != nil {
		s.fail(w, r, err)
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
		s.fail(w, r, err)
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
		s.fail(w, r, err)
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
		s.fail(w, r, err)
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
			s.fail(w, r, err)
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
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, t)
	}
}
