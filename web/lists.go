package web

import (
	"net/http"
	"slices"
	"strings"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/httpapi"
	"github.com/roombridge/roombridge/requests"
)

// inboxView is the inbox page's data: what this person may answer in every
// room they see, oldest first, and the running tasks of those rooms.
type inboxView struct {
	Cards []*cardView
	Tasks []stripItem
}

func (s *Server) inboxPage(_ http.ResponseWriter, r *http.Request, sess *session) (string, view, error) {
	ctx := r.Context()
	var iv inboxView
	var items []answerItem
	for _, room := range s.visibleRooms(sess.User) {
		its, _, err := s.answerable(ctx, room, sess.User)
		if err != nil {
			return "", view{}, err
		}
		items = append(items, its...)
		st, err := s.strip(ctx, room, sess.User)
		if err != nil {
			return "", view{}, err
		}
		iv.Tasks = append(iv.Tasks, st...)
	}
	slices.SortStableFunc(items, func(a, b answerItem) int {
		return a.Item.Approval.Created.Compare(b.Item.Approval.Created)
	})
	for i, it := range items {
		iv.Cards = append(iv.Cards, s.card(it.Item, i+1, len(items), sess.User))
	}
	return "inbox.html", view{Title: "Inbox", Live: "*", Data: iv}, nil
}

// taskRow is a line of the Tasks page: a task and its request's room.
type taskRow struct {
	delegation.Task
	Room string
}

// tasksPage lists the background tasks of the rooms the person may see,
// running and ended, newest first, with their outcome (?room=NAME: that
// room's only).
func (s *Server) tasksPage(_ http.ResponseWriter, r *http.Request, sess *session) (string, view, error) {
	var out []taskRow
	only := r.URL.Query().Get("room")
	if s.tasks != nil {
		all, err := s.tasks.Tasks(r.Context(), s.svc.Owner())
		if err != nil {
			return "", view{}, err
		}
		rooms := map[requests.ID]string{} // "": the person may not see it
		for _, t := range all {
			room, known := rooms[t.Request]
			if !known {
				if req, err := s.svc.Get(r.Context(), t.Request); err == nil && s.rooms.MayAsk(req.Room, sess.User) {
					room = req.Room
				}
				rooms[t.Request] = room
			}
			if room != "" && (only == "" || only == room) {
				out = append(out, taskRow{Task: t, Room: room})
			}
		}
		slices.Reverse(out) // newest first
	}
	return "tasks.html", view{Title: "Tasks", Live: "*", Data: out}, nil
}

// auditView is the audit page's data.
type auditView struct {
	Since, Until, Request, Actor string
	Records                      []audit.Record
	Error                        string
	Export                       string
}

// auditLimit bounds the records the audit page shows (export has them all).
const auditLimit = 500

// auditQuery reads the audit page's search form.
func (s *Server) auditQuery(r *http.Request) (audit.Query, auditView, error) {
	q := r.URL.Query()
	av := auditView{Since: q.Get("since"), Until: q.Get("until"), Request: q.Get("request"), Actor: q.Get("actor")}
	var aq audit.Query
	var err error
	if aq.Since, err = httpapi.ParseTime("since", av.Since); err != nil {
		return aq, av, err
	}
	if aq.Until, err = httpapi.ParseTime("until", av.Until); err != nil {
		return aq, av, err
	}
	if av.Request != "" {
		id, err := requests.ParseRef(av.Request, s.now())
		if err != nil {
			return aq, av, err
		}
		aq.RequestID = id.String()
	}
	return aq, av, nil
}

func (s *Server) auditPage(_ http.ResponseWriter, r *http.Request, sess *session) (string, view, error) {
	if !s.mayAudit(sess) {
		return "", view{}, errForbidden
	}
	aq, av, err := s.auditQuery(r)
	av.Export = r.URL.Query().Encode()
	if err != nil {
		av.Error = err.Error()
		return "audit.html", view{Title: "Audit", Data: av}, nil
	}
	err = audit.Each(r.Context(), s.store, aq, func(rec *audit.Record) error {
		if av.Actor == "" || strings.Contains(rec.Actor, av.Actor) {
			av.Records = append(av.Records, *rec)
		}
		if len(av.Records) > auditLimit {
			av.Records = av.Records[1:] // keep the newest
		}
		return nil
	})
	slices.Reverse(av.Records)
	return "audit.html", view{Title: "Audit", Data: av}, err
}

// auditExport streams the audit records of the search as CSV or JSONL
// (format=csv|jsonl), as a download.
func (s *Server) auditExport(w http.ResponseWriter, r *http.Request) {
	sess := s.session(r)
	if sess == nil || !s.mayAudit(sess) {
		http.Error(w, "403 you may not export the audit log", http.StatusForbidden)
		return
	}
	aq, _, err := s.auditQuery(r)
	if err != nil {
		http.Error(w, "400 "+err.Error(), http.StatusBadRequest)
		return
	}
	format, err := audit.ParseFormat(r.URL.Query().Get("format"))
	if err != nil {
		http.Error(w, "400 format: "+err.Error(), http.StatusBadRequest)
		return
	}
	ext, ctype := "jsonl", "application/x-ndjson"
	if format == audit.CSV {
		ext, ctype = "csv", "text/csv"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", `attachment; filename="audit.`+ext+`"`)
	if _, err := audit.Export(r.Context(), s.store, aq, format, w, nil); err != nil {
		s.log.ErrorContext(r.Context(), "web audit export failed mid-stream", "error", err)
	}
}
