package web

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/config"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// pageSize is how many requests a room page shows.
const pageSize = 50

// view is what every page template gets.
type view struct {
	Title string
	User  string
	CSRF  string
	Rooms []string
	// Live is the room whose changes the page follows ("*": any the person
	// may see; "": none).
	Live string
	// Request is the request whose answer the page shows as it is written
	// ("": none).
	Request string
	// Notice is what the last action said (?notice=).
	Notice string
	Data   any
}

// cardArgs is what the card template gets: the card, the CSRF token, the
// page to come back to, and whether ✕ is offered (not in the Inbox itself).
type cardArgs struct {
	Card *cardView
	CSRF string
	Back string
	Hide bool
}

// handler renders one page for a signed-in person.
type handler func(w http.ResponseWriter, r *http.Request, sess *session) (name string, v view, err error)

// errNotFound and errForbidden are a page's 404 and 403.
var (
	errNotFound  = errors.New("not found")
	errForbidden = errors.New("you may not see this")
)

// page serves a page: not signed in, the sign-in page.
func (s *Server) page(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.session(r)
		if sess == nil {
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		}
		name, v, err := h(w, r, sess)
		switch {
		case errors.Is(err, errNotFound), errors.Is(err, requests.ErrUnknown), errors.Is(err, requests.ErrBadID):
			http.Error(w, "404 "+err.Error(), http.StatusNotFound)
			return
		case errors.Is(err, errForbidden):
			http.Error(w, "403 "+err.Error(), http.StatusForbidden)
			return
		case err != nil:
			s.log.ErrorContext(r.Context(), "rendering a web page", "error", err)
			http.Error(w, "500 "+err.Error(), http.StatusInternalServerError)
			return
		}
		v.User, v.CSRF, v.Rooms = sess.User, sess.CSRF, s.visibleRooms(sess.User)
		v.Notice = r.URL.Query().Get("notice")
		s.render(w, name, v)
	}
}

func (s *Server) render(w http.ResponseWriter, name string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.tmpl.ExecuteTemplate(w, name, v); err != nil {
		s.log.Error("executing a web template", "template", name, "error", err)
	}
}

// visibleRooms are the rooms user may see: those they may ask in (members,
// approvers, owners).
func (s *Server) visibleRooms(user string) []string {
	var out []string
	for _, rm := range s.rooms.All() {
		if s.rooms.MayAsk(rm.Name, user) {
			out = append(out, rm.Name)
		}
	}
	return out
}

func (s *Server) mayAudit(sess *session) bool { return sess.Admin || s.rooms.MayRevoke(sess.User) }

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	sess := s.session(r)
	if sess == nil {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	if rs := s.visibleRooms(sess.User); len(rs) > 0 {
		http.Redirect(w, r, "/rooms/"+url.PathEscape(rs[0]), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/inbox", http.StatusSeeOther)
}

// roomView is the room page's data.
type roomView struct {
	Room    config.Room
	Page    page
	State   string
	Agent   string
	States  []string
	MayAsk  bool
	Card    *cardView
	Strip   []stripItem
	Runners []runnerRow // the runners of the room's agents
	Waiting int         // answerable items, hidden ones included
	Hidden  int
}

// cardView is the inbox card: the first item this person may answer.
type cardView struct {
	Item      approvals.Item
	Position  int
	Of        int
	MayDecide bool
	Question  bool
	// Prev and Next are the room page's links to the cards before and
	// after this one ("": none; the Inbox lists them all).
	Prev, Next string
}

// stripItem is one line of the task strip.
type stripItem struct {
	Task     delegation.Task
	Elapsed  string
	MayStop  bool
	Finished bool
}

func (s *Server) roomPage(_ http.ResponseWriter, r *http.Request, sess *session) (string, view, error) {
	ctx := r.Context()
	rm, ok := s.rooms.Named(r.PathValue("room"))
	if !ok {
		return "", view{}, errNotFound
	}
	if !s.rooms.MayAsk(rm.Name, sess.User) {
		return "", view{}, errForbidden
	}
	q := r.URL.Query()
	rv := roomView{Room: rm, State: q.Get("state"), Agent: q.Get("agent"), MayAsk: true}
	for st := requests.Pending; st <= requests.Expired; st++ {
		rv.States = append(rv.States, st.String())
	}
	var state requests.State
	if rv.State != "" {
		var err error
		if state, err = requests.ParseState(rv.State); err != nil {
			return "", view{}, fmt.Errorf("%w: %v", errNotFound, err)
		}
	}
	var after requests.ID
	if a := q.Get("after"); a != "" {
		var err error
		if after, err = requests.ParseID(a); err != nil {
			return "", view{}, err
		}
	}
	var err error
	if rv.Page, err = s.roomRequests(ctx, rm.Name, after, state, rv.Agent, pageSize); err != nil {
		return "", view{}, err
	}
	items, hidden, err := s.answerable(ctx, rm.Name, sess.User)
	if err != nil {
		return "", view{}, err
	}
	rv.Waiting, rv.Hidden = len(items), hidden
	if shown := visible(items); len(shown) > 0 {
		n, _ := strconv.Atoi(q.Get("card")) // "1 of N": which one (?card=, from 1)
		n = min(max(n, 1), len(shown))
		rv.Card = s.card(shown[n-1].Item, n, len(shown), sess.User)
		at := func(i int) string { return "/rooms/" + url.PathEscape(rm.Name) + "?card=" + strconv.Itoa(i) }
		if n > 1 {
			rv.Card.Prev = at(n - 1)
		}
		if n < len(shown) {
			rv.Card.Next = at(n + 1)
		}
	}
	if rv.Strip, err = s.strip(ctx, rm.Name, sess.User); err != nil {
		return "", view{}, err
	}
	if rv.Runners, err = s.roomRunners(ctx, rm.Agents); err != nil {
		return "", view{}, err
	}
	return "room.html", view{Title: rm.Name, Live: rm.Name, Data: rv}, nil
}

func (s *Server) card(it approvals.Item, pos, of int, user string) *cardView {
	a := it.Approval
	return &cardView{Item: it, Position: pos, Of: of, Question: a.Kind == approvals.KindQuestion,
		MayDecide: a.Kind != approvals.KindQuestion && s.rooms.MayDecide(a.Room, user) ||
			a.Kind == approvals.KindQuestion && s.appr.MayAnswer(a, user)}
}

// answerItem is an inbox item with whether this person hid it.
type answerItem struct {
	Item   approvals.Item
	Hidden bool
}

func visible(items []answerItem) []answerItem {
	return slices.DeleteFunc(slices.Clone(items), func(a answerItem) bool { return a.Hidden })
}

// answerable lists the items of room's inbox that user may answer, oldest
// first, and how many of them they hid.
func (s *Server) answerable(ctx context.Context, room, user string) ([]answerItem, int, error) {
	in, err := s.appr.Inbox(ctx, room)
	if err != nil {
		return nil, 0, err
	}
	var out []answerItem
	hidden := 0
	err = s.store.View(ctx, func(tx store.Tx) error {
		out, hidden = nil, 0
		for _, it := range in.Items {
			a := it.Approval
			if a.Kind == approvals.KindQuestion && !s.appr.MayAnswer(a, user) ||
				a.Kind != approvals.KindQuestion && !s.rooms.MayDecide(a.Room, user) {
				continue
			}
			_, err := tx.Get(bucketHidden, user+"/"+a.ID)
			h := err == nil
			if h {
				hidden++
			}
			out = append(out, answerItem{Item: it, Hidden: h})
		}
		return nil
	})
	return out, hidden, err
}

// strip lists the task strip of room: its listed tasks (running, failed or
// interrupted until dismissed) and those that ended in the last few
// seconds.
func (s *Server) strip(ctx context.Context, room, user string) ([]stripItem, error) {
	if s.tasks == nil {
		return nil, nil
	}
	listed, err := s.tasks.Running(ctx, room)
	if err != nil {
		return nil, err
	}
	all, err := s.roomTasks(ctx, room)
	if err != nil {
		return nil, err
	}
	now := s.now()
	for _, t := range all {
		if !t.Listed() && !t.Ended.IsZero() && now.Sub(t.Ended) < s.recent &&
			!slices.ContainsFunc(listed, func(l delegation.Task) bool { return l.ID == t.ID }) {
			listed = append(listed, t)
		}
	}
	out := make([]stripItem, 0, len(listed))
	for _, t := range listed {
		end := now
		if !t.Ended.IsZero() {
			end = t.Ended
		}
		out = append(out, stripItem{Task: t, Elapsed: end.Sub(t.Started).Round(time.Second).String(),
			MayStop: t.State == delegation.TaskRunning && s.mayStop(ctx, t, user), Finished: !t.Listed()})
	}
	return out, nil
}

// roomTasks are the tasks of room's requests, in the order they started.
func (s *Server) roomTasks(ctx context.Context, room string) ([]delegation.Task, error) {
	all, err := s.tasks.Tasks(ctx, s.svc.Owner())
	if err != nil {
		return nil, err
	}
	var out []delegation.Task
	for _, t := range all {
		if r, err := s.svc.Get(ctx, t.Request); err == nil && r.Room == room {
			out = append(out, t)
		}
	}
	return out, nil
}

// mayStop: a task's request's requester, the room's approvers and owners
// may stop it (as they may cancel the request).
func (s *Server) mayStop(ctx context.Context, t delegation.Task, user string) bool {
	r, err := s.svc.Get(ctx, t.Request)
	return err == nil && (r.Requester == user || s.rooms.MayDecide(r.Room, user))
}

// idRE finds request IDs in text.
var idRE = regexp.MustCompile(`\bR[0-9]{8}-[0-9]+\b`)

// linkIDs escapes text and makes every request ID in it a link.
func linkIDs(text string) template.HTML {
	esc := template.HTMLEscapeString(text)
	return template.HTML(idRE.ReplaceAllStringFunc(esc, func(id string) string {
		return `<a href="/requests/` + id + `">` + id + `</a>`
	}))
}

func funcs(s *Server) template.FuncMap {
	return template.FuncMap{
		"ids":   linkIDs,
		"since": func(t time.Time) string { return s.now().Sub(t).Round(time.Second).String() },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"path": url.PathEscape,
		"cardArgs": func(c *cardView, csrf, back string) cardArgs {
			return cardArgs{Card: c, CSRF: csrf, Back: back, Hide: back != "/inbox"}
		},
	}
}

// requestView is the request page's data.
type requestView struct {
	R         *requests.Request
	Approval  *approvals.Approval
	Timeline  []audit.Record
	MayCancel bool
	MayRetry  bool
	Tasks     []delegation.Task
}

func (s *Server) requestPage(_ http.ResponseWriter, r *http.Request, sess *session) (string, view, error) {
	ctx := r.Context()
	id, err := requests.ParseID(r.PathValue("id"))
	if err != nil {
		return "", view{}, err
	}
	req, err := s.svc.Get(ctx, id)
	if err != nil {
		return "", view{}, err
	}
	if !s.rooms.MayAsk(req.Room, sess.User) {
		return "", view{}, errForbidden
	}
	rv := requestView{R: req, MayCancel: !req.State.Terminal() && (req.Requester == sess.User || s.rooms.MayDecide(req.Room, sess.User)),
		MayRetry: req.State.Terminal()}
	if a, err := s.appr.Get(ctx, id.String()); err == nil {
		rv.Approval = a
	}
	if rv.Timeline, err = audit.List(ctx, s.store, audit.Query{RequestID: id.String()}, 500); err != nil {
		return "", view{}, err
	}
	if s.tasks != nil {
		all, err := s.tasks.Tasks(ctx, s.svc.Owner())
		if err != nil {
			return "", view{}, err
		}
		for _, t := range all {
			if t.Request == id {
				rv.Tasks = append(rv.Tasks, t)
			}
		}
	}
	return "request.html", view{Title: id.String(), Live: req.Room, Request: id.String(), Data: rv}, nil
}
