package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// keepAlive is how often an idle SSE stream sends a comment (proxies close
// silent connections); nothing else runs while nothing changes.
const keepAlive = 30 * time.Second

// events streams Server-Sent Events to a signed-in page: "change" when
// something the page shows may have changed, and the page fetches itself
// again (what it gets is filtered to the person); with request=ID (a
// request page), "text" with the answer written so far (a JSON string),
// while its agent writes it, if the person may see that request. It wakes on the store's
// notifications: the rooms the person may see (room=NAME: that one; "*":
// all of them), approvals (cards) and the outbox (task lines), and on the
// runners' hub (a runner connected or dropped: the runners section). A
// room the person may not see is refused.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	sess := s.session(r)
	if sess == nil {
		http.Error(w, "401 not signed in", http.StatusUnauthorized)
		return
	}
	rooms := s.visibleRooms(sess.User)
	if room := r.URL.Query().Get("room"); room != "*" {
		if !s.rooms.MayAsk(room, sess.User) || !contains(rooms, room) {
			http.Error(w, "403 you may not see this room", http.StatusForbidden)
			return
		}
		rooms = []string{room}
	}
	text, stop, err := s.watch(r, sess)
	if err != nil {
		http.Error(w, "403 you may not see this request", http.StatusForbidden)
		return
	}
	defer stop()
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "500 streaming unsupported", http.StatusInternalServerError)
		return
	}
	wake := make(chan struct{}, 1)
	topics := []string{approvals.TopicApprovals, store.TopicOutbox}
	for _, rm := range rooms {
		topics = append(topics, TopicRoom(rm))
	}
	for _, t := range topics {
		ch, unsub := s.store.Subscribe(t)
		defer unsub()
		go forward(r.Context().Done(), ch, wake)
	}
	if s.remote != nil {
		go s.runnerChanges(r.Context().Done(), s.remote.Changed(), wake)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-wake:
			// The text written before the change goes first: the answer
			// landing is then shown after its last words, not before.
			select {
			case t := <-text:
				sendText(w, t)
			default:
			}
			fmt.Fprint(w, "event: change\ndata: {}\n\n")
		case t := <-text:
			sendText(w, t)
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		fl.Flush()
	}
}

// watch subscribes to the live text of the request=ID of r, if any (a nil
// channel, never ready, if not, or without a Watcher); an error if sess may
// not see that request.
func (s *Server) watch(r *http.Request, sess *session) (<-chan string, func(), error) {
	q := r.URL.Query().Get("request")
	if q == "" || s.live == nil {
		return nil, func() {}, nil
	}
	id, err := requests.ParseID(q)
	if err != nil {
		return nil, nil, err
	}
	req, err := s.svc.Get(r.Context(), id)
	if err != nil {
		return nil, nil, err
	}
	if !s.rooms.MayAsk(req.Room, sess.User) {
		return nil, nil, errForbidden
	}
	text, stop := s.live.Watch(id.String())
	return text, stop, nil
}

// sendText writes a "text" event: the live text as a JSON string (one
// line: JSON escapes the newlines).
func sendText(w http.ResponseWriter, t string) {
	data, _ := json.Marshal(t)
	fmt.Fprintf(w, "event: text\ndata: %s\n\n", data)
}

// forward copies the (coalesced) signals of ch to wake until done.
func forward(done <-chan struct{}, ch <-chan struct{}, wake chan<- struct{}) {
	for {
		select {
		case <-done:
			return
		case <-ch:
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}
