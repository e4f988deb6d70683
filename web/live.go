package web

import (
	"fmt"
	"net/http"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/store"
)

// keepAlive is how often an idle SSE stream sends a comment (proxies close
// silent connections); nothing else runs while nothing changes.
const keepAlive = 30 * time.Second

// events streams Server-Sent Events to a signed-in page: "change" when
// something the page shows may have changed, and the page fetches itself
// again (what it gets is filtered to the person). It wakes on the store's
// notifications: the rooms the person may see (room=NAME: that one; "*":
// all of them), approvals (cards) and the outbox (task lines). A room the
// person may not see is refused.
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
			fmt.Fprint(w, "event: change\ndata: {}\n\n")
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		fl.Flush()
	}
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
