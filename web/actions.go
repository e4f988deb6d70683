package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// action carries out a POST for sess: it returns where to go next (a page
// of the web room) or an error.
type action func(r *http.Request, sess *session) (next string, err error)

// errRefused marks a refusal the web room decided (audited here); the
// services audit their own.
type errRefused struct{ error }

// post serves a POST: session and CSRF checked, then the action; the
// answer is a redirect back (303), so forms work without JavaScript. A
// refused action is 403.
func (s *Server) post(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.checkPost(w, r)
		if sess == nil {
			return
		}
		next, err := a(r, sess)
		var ref errRefused
		switch {
		case errors.As(err, &ref):
			s.refuse(w, r, sess.User, ref.Error())
			return
		case errors.Is(err, approvals.ErrForbidden):
			http.Error(w, "403 "+err.Error(), http.StatusForbidden) // audited where it was decided
			return
		case err != nil:
			next = withNotice(back(r), err.Error())
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// back is the page a form came from (its "back" field), if that is a clean
// path of this site (onSite), else /.
func back(r *http.Request) string {
	if b := r.PostFormValue("back"); onSite(b) {
		return b
	}
	return "/"
}

// onSite reports whether b is a path of this site that no browser can read
// as another site: no control character anywhere (browsers strip tabs and
// newlines, so "/\t/evil" is "//evil"), no backslash (read as "/"), no
// scheme, host or user, and a path that starts with a single "/" — also
// after percent-decoding it, as often as it decodes ("/%2F/evil").
func onSite(b string) bool {
	if hasCtlOrBackslash(b) {
		return false
	}
	u, err := url.Parse(b)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return false
	}
	p := u.EscapedPath()
	for range 4 {
		if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || hasCtlOrBackslash(p) {
			return false
		}
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			return true // decoded to the end ("%" left over is no escape: a room "100%")
		}
		p = d
	}
	return false // still encoded after four rounds: no page of ours
}

// hasCtlOrBackslash reports whether s has an ASCII control character
// (C0 or DEL) or a backslash.
func hasCtlOrBackslash(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' })
}

func withNotice(path, msg string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "notice=" + url.QueryEscape(msg)
}

// ask asks an agent of the room as the signed-in person: a non-owner's ask
// waits for approval, as in chat.
func (s *Server) ask(r *http.Request, sess *session) (string, error) {
	rm, ok := s.rooms.Named(r.PathValue("room"))
	if !ok {
		return "", errNotFound
	}
	if !s.rooms.MayAsk(rm.Name, sess.User) {
		return "", errRefused{fmt.Errorf("%s is not a member of room %s", sess.User, rm.Name)}
	}
	agent, text := r.PostFormValue("agent"), strings.TrimSpace(r.PostFormValue("text"))
	if agent == "" {
		agent = rm.Agents[0]
	}
	if !contains(rm.Agents, agent) {
		return "", fmt.Errorf("%q is not an agent of room %s", agent, rm.Name)
	}
	if text == "" {
		return "", fmt.Errorf("the ask is empty")
	}
	req, err := s.svc.Create(r.Context(), requests.Ask{Agent: agent, Room: rm.Name, Surface: Surface, User: sess.User,
		Text: text, Approved: sess.Admin})
	if err != nil {
		return "", err
	}
	return withNotice(back(r), fmt.Sprintf("%s → %s (%s)", req.ID, req.Agent, req.State)), nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// requestAction is cancel or retry of a request.
func (s *Server) requestAction(r *http.Request, sess *session) (string, error) {
	id, err := requests.ParseID(r.PathValue("id"))
	if err != nil {
		return "", err
	}
	switch r.PathValue("verb") {
	case "cancel":
		req, err := s.act.Cancel(r.Context(), id, sess.User, Surface)
		if err != nil {
			return "", refusal(err)
		}
		return withNotice(back(r), req.ID.String()+" "+req.State.String()), nil
	case "retry":
		req, err := s.act.Retry(r.Context(), id, sess.User, Surface)
		if err != nil {
			return "", refusal(err)
		}
		return "/requests/" + req.ID.String(), nil
	}
	return "", errNotFound
}

// refusal turns a refusal the rooms router decided without auditing it
// (cancel, retry) into one the web room audits.
func refusal(err error) error {
	if errors.Is(err, approvals.ErrForbidden) {
		return errRefused{err}
	}
	return err
}

// approvalAction decides, answers or hides (✕) an inbox item.
func (s *Server) approvalAction(r *http.Request, sess *session) (string, error) {
	id := r.PathValue("id")
	switch verb := r.PathValue("verb"); verb {
	case "approve", "deny":
		a, err := s.act.Decide(r.Context(), id, verb == "approve", sess.User, Surface)
		if err != nil {
			return "", err
		}
		return withNotice(back(r), a.ID+" "+string(a.State)), nil
	case "answer":
		a, err := s.act.Answer(r.Context(), id, r.PostFormValue("text"), sess.User, Surface)
		if err != nil {
			return "", err
		}
		return withNotice(back(r), a.ID+" answered"), nil
	case "hide", "unhide":
		err := s.store.Update(r.Context(), func(tx store.Tx) error {
			if verb == "unhide" {
				return tx.Delete(bucketHidden, sess.User+"/"+id)
			}
			return tx.Put(bucketHidden, sess.User+"/"+id, nil)
		})
		return back(r), err
	}
	return "", errNotFound
}

// taskAction stops (■) or dismisses (✕) a background task.
func (s *Server) taskAction(r *http.Request, sess *session) (string, error) {
	if s.tasks == nil {
		return "", errNotFound
	}
	id := r.PathValue("id")
	switch r.PathValue("verb") {
	case "stop":
		var found bool
		ts, err := s.tasks.Tasks(r.Context(), s.svc.Owner())
		if err != nil {
			return "", err
		}
		for _, t := range ts {
			if t.ID == id {
				found = true
				if !s.mayStop(r.Context(), t, sess.User) {
					return "", errRefused{fmt.Errorf("only the requester of %s, the room's approvers or an owner may stop %s", t.Request, t.ID)}
				}
			}
		}
		if !found {
			return "", fmt.Errorf("no such task %q", id)
		}
		t, err := s.tasks.StopTask(r.Context(), id, sess.User, Surface)
		if err != nil {
			return "", err
		}
		return withNotice(back(r), t.Line()), nil
	case "dismiss":
		t, err := s.tasks.DismissTask(r.Context(), id, sess.User, Surface)
		if err != nil {
			return "", err
		}
		return withNotice(back(r), t.Line()+" — dismissed"), nil
	}
	return "", errNotFound
}

// signinPage shows the sign-in form: with a link's token, one button that
// uses it (a GET never uses a link, so chat previews cannot spend it);
// else the API token form.
func (s *Server) signinPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, "signin.html", view{Title: "Sign in", Data: map[string]string{"Token": r.URL.Query().Get("t"),
		"Notice": r.URL.Query().Get("notice")}})
}

func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	var sess *session
	var tok string
	var err error
	if t := r.PostFormValue("t"); t != "" {
		sess, tok, err = s.useLink(r.Context(), t)
	} else {
		sess, tok, err = s.signInToken(r.Context(), r.PostFormValue("token"))
	}
	if err != nil {
		s.refuse(w, r, "web:anonymous", "sign-in refused: "+err.Error())
		return
	}
	s.setCookie(w, tok, sess.Expires)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) signout(w http.ResponseWriter, r *http.Request) {
	sess := s.checkPost(w, r)
	if sess == nil {
		return
	}
	if err := s.endSession(r.Context(), sess); err != nil {
		http.Error(w, "500 "+err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}
