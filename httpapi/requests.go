package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// Pages of GET /v1/requests: DefaultLimit requests unless limit= says
// otherwise, at most MaxLimit.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// listRequests answers one page of requests in ID order and, when more
// follow, next: the cursor to pass as after= for the next page.
func (s *Server) listRequests(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := requests.Filter{Agent: q.Get("agent"), Limit: DefaultLimit}
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
		if err != nil || n < 0 || n > MaxLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit: want a number from 1 to %d (0 or none: %d)", MaxLimit, DefaultLimit))
			return
		}
		if n > 0 {
			f.Limit = n
		}
	}
	var after requests.ID
	if a := q.Get("after"); a != "" {
		id, err := requests.ParseID(a)
		if err != nil {
			writeError(w, http.StatusBadRequest, "after: want the next of a previous page (a request ID)")
			return
		}
		after = id
	}
	list, next, err := s.svc.Page(r.Context(), f, after)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if list == nil {
		list = []*requests.Request{}
	}
	res := ListResult{Requests: list, Count: len(list)}
	if !next.IsZero() {
		res.Next = next.String()
	}
	writeJSON(w, http.StatusOK, res)
}

// ListResult is the answer of GET /v1/requests.
type ListResult struct {
	Requests []*requests.Request `json:"requests"`
	Count    int                 `json:"count"`
	// Next, when more requests follow, is the after= of the next page.
	Next string `json:"next,omitempty"`
}

// CreateBody is the body of POST /v1/requests.
type CreateBody struct {
	Room  string `json:"room"`
	Agent string `json:"agent"`
	Text  string `json:"text"`
}

// Idempotency keys of POST /v1/requests: a retry with the same key within
// IdempotencyTTL answers the request the first call created.
const (
	IdempotencyTTL    = 24 * time.Hour
	MaxIdempotencyKey = 200
)

func (s *Server) createRequest(w http.ResponseWriter, r *http.Request) {
	var b CreateBody
	if !s.decodeBody(w, r, &b, "") {
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
	key := r.Header.Get("Idempotency-Key")
	if len(key) > MaxIdempotencyKey {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Idempotency-Key: over %d bytes", MaxIdempotencyKey))
		return
	}
	ask := requests.Ask{Agent: b.Agent, Room: room.Name, Surface: chat.API, User: APIActor, Text: b.Text, Approved: true}
	req, replayed, err := s.create(r.Context(), ask, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotency-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, req)
}

// errKeyReused: an Idempotency-Key came back with another ask.
var errKeyReused = fmt.Errorf("%w: this Idempotency-Key was used for another ask", requests.ErrIllegalTransition)

// create creates the request of ask; with an idempotency key, in the same
// transaction as the key (a dedupe key of the store, kept IdempotencyTTL),
// and a key seen already answers the request it created (replayed).
func (s *Server) create(ctx context.Context, ask requests.Ask, key string) (*requests.Request, bool, error) {
	var req *requests.Request
	replayed := false
	err := s.svc.Store().Update(ctx, func(tx store.Tx) error {
		replayed = false
		dk := "idempotency:" + APIActor + ":" + key
		now := s.svc.Clock().Now()
		if key != "" {
			v, live, err := store.Recall(tx, dk, now)
			if err != nil {
				return err
			}
			if live {
				id, err := requests.ParseID(string(v))
				if err != nil {
					return fmt.Errorf("httpapi: idempotency key: %w", err)
				}
				if req, err = s.svc.GetTx(tx, id); err != nil {
					return err
				}
				if req.Agent != ask.Agent || req.Room != ask.Room || req.Ask != ask.Text {
					return errKeyReused
				}
				replayed = true
				return nil
			}
		}
		var err error
		if req, err = s.svc.CreateTx(tx, ask); err != nil || key == "" {
			return err
		}
		return store.Remember(tx, dk, []byte(req.ID.String()), now, IdempotencyTTL)
	})
	return req, replayed, err
}
