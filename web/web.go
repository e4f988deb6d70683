// Package web is the web room: the bridge's pages at / (a room's requests,
// its inbox card, task strip and runners, a request's page, the inbox, the tasks and
// the audit log), rendered on the server with html/template and kept live by
// Server-Sent Events fed from the store's change notifications. People sign
// in with a one-time link the bot sends them in chat ("web"), or with the
// API token; every action goes through the same rules as chat (the room
// directory) and is audited with surface "web".
package web

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/clock"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/directory"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Surface is how the web room's actions appear in the audit log.
const Surface = "web"

// maxForm bounds a POSTed form.
const maxForm = 64 << 10

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Actions are the actions people take, under the room directory's rules
// (*rooms.Router).
type Actions interface {
	Decide(ctx context.Context, id string, approve bool, user, surface string) (*approvals.Approval, error)
	Answer(ctx context.Context, id, text, user, surface string) (*approvals.Approval, error)
	Cancel(ctx context.Context, id requests.ID, user, surface string) (*requests.Request, error)
	Retry(ctx context.Context, id requests.ID, user, surface string) (*requests.Request, error)
}

// Tasks are the background tasks (*delegation.Service).
type Tasks interface {
	Running(ctx context.Context, room string) ([]delegation.Task, error)
	Tasks(ctx context.Context, owner string) ([]delegation.Task, error)
	StopTask(ctx context.Context, id, actor, surface string) (*delegation.Task, error)
	DismissTask(ctx context.Context, id, actor, surface string) (*delegation.Task, error)
}

// Watcher is the live text of requests as their agents write it
// (*threads.Live): the whole text so far at once, then after each change.
type Watcher interface {
	Watch(request string) (text <-chan string, cancel func())
}

// Options configure a Server.
type Options struct {
	Requests  *requests.Service
	Approvals *approvals.Service
	Rooms     *directory.Rooms
	Actions   Actions
	Tasks     Tasks
	// Runners are the runners of agents on other machines (nil: none):
	// a room's page lists those of its agents.
	Runners Runners
	// Token is the API token (its holders may sign in as admin).
	Token string
	// PublicURL is where people reach the web room ("": BaseURL's fallback
	// is http://Addr, or https://Addr with TLS).
	PublicURL string
	Addr      string
	// TLS: the API port serves TLS (http.tls_cert_file): the fallback URL
	// is https and cookies are Secure.
	TLS bool
	Log *slog.Logger
}

// Server serves the web room.
type Server struct {
	svc    *requests.Service
	appr   *approvals.Service
	rooms  *directory.Rooms
	act    Actions
	tasks  Tasks
	remote Runners // nil: room pages list no runners
	live   Watcher // nil: request pages show no live text
	store  store.Store
	clock  clock.Clock
	token  string
	public string
	addr   string
	tls    bool
	secure bool
	log    *slog.Logger
	tmpl   *template.Template
	mux    *http.ServeMux
	recent time.Duration
	// closing ends the live streams (Close).
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns the web room's Server. Register Observe as a request observer
// and call Backfill once before serving.
func New(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{svc: o.Requests, appr: o.Approvals, rooms: o.Rooms, act: o.Actions, tasks: o.Tasks, remote: o.Runners,
		store: o.Requests.Store(), clock: o.Requests.Clock(), token: o.Token, public: o.PublicURL, addr: o.Addr,
		secure: strings.HasPrefix(o.PublicURL, "https://") || (o.PublicURL == "" && o.TLS), tls: o.TLS, log: o.Log, mux: http.NewServeMux(),
		recent: 10 * time.Second, closing: make(chan struct{})}
	s.tmpl = template.Must(template.New("").Funcs(funcs(s)).ParseFS(templateFS, "templates/*.html"))
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.routes()
	return s
}

// SetLive makes request pages show the answer as it is written, from w
// (set before serving: the core builds the live work after the web room).
func (s *Server) SetLive(w Watcher) { s.live = w }

// base is the URL the web room is reached at.
func (s *Server) base() string {
	if s.public != "" {
		return s.public
	}
	if s.tls {
		return "https://" + s.addr
	}
	return "http://" + s.addr
}

// URL is where the web room is reached (web.public_url, else the API's
// address).
func (s *Server) URL() string { return s.base() }

// RequestURL is the page of request id ("" without a public URL: chat
// cards then carry no link).
func (s *Server) RequestURL(id string) string {
	if s.public == "" {
		return ""
	}
	return s.public + "/requests/" + id
}

// Close ends the live streams (a graceful stop: the HTTP server's shutdown
// would wait for them); pages are still served.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closing) }) }

func (s *Server) now() time.Time { return s.clock.Now().UTC() }

// ServeHTTP implements http.Handler: every answer carries a strict
// Content-Security-Policy (no inline script or style) and refuses framing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /{$}", s.home)
	s.mux.HandleFunc("GET /signin", s.signinPage)
	s.mux.HandleFunc("POST /signin", s.signin)
	s.mux.HandleFunc("POST /signout", s.signout)
	s.mux.HandleFunc("GET /rooms/{room}", s.page(s.roomPage))
	s.mux.HandleFunc("GET /requests/{id}", s.page(s.requestPage))
	s.mux.HandleFunc("GET /inbox", s.page(s.inboxPage))
	s.mux.HandleFunc("GET /tasks", s.page(s.tasksPage))
	s.mux.HandleFunc("GET /audit", s.page(s.auditPage))
	s.mux.HandleFunc("GET /audit/export", s.auditExport)
	s.mux.HandleFunc("GET /events", s.events)
	s.mux.HandleFunc("POST /rooms/{room}/ask", s.post(s.ask))
	s.mux.HandleFunc("POST /requests/{id}/{verb}", s.post(s.requestAction))
	s.mux.HandleFunc("POST /approvals/{id}/{verb}", s.post(s.approvalAction))
	s.mux.HandleFunc("POST /tasks/{id}/{verb}", s.post(s.taskAction))
}
