package runners

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/roombridge/roombridge/store"
)

// Status is a runner as `bridge runners list` shows it.
type Status struct {
	Name        string    `json:"name"`
	Connected   bool      `json:"connected"`
	Away        bool      `json:"away,omitempty"` // silent past the grace
	Agents      []string  `json:"agents"`
	Turns       int       `json:"turns"`
	LastContact time.Time `json:"last_contact,omitzero"`
	Created     time.Time `json:"created"`
}

// API serves /v1/runners (list, add) and /v1/runners/{name}/revoke behind
// the API's bearer token.
func (h *Hub) API(token string) map[string]http.Handler {
	auth := func(fn http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(token)) != 1 {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong token"})
				return
			}
			fn(w, r)
		})
	}
	return map[string]http.Handler{
		"GET /v1/runners": auth(func(w http.ResponseWriter, r *http.Request) {
			st, err := h.Statuses(r.Context())
			if err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, st)
		}),
		"POST /v1/runners": auth(func(w http.ResponseWriter, r *http.Request) {
			var in struct{ Name string }
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"name\": \"...\"}"})
				return
			}
			tok, err := Add(r.Context(), h.o.Store, h.o.Clock.Now(), in.Name)
			switch {
			case errors.Is(err, ErrExists):
				writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			case err != nil:
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			default:
				writeJSON(w, http.StatusOK, map[string]string{"name": in.Name, "token": tok})
			}
		}),
		"POST /v1/runners/{name}/revoke": auth(func(w http.ResponseWriter, r *http.Request) {
			err := h.Revoke(r.Context(), r.PathValue("name"))
			switch {
			case errors.Is(err, store.ErrNotFound):
				writeJSON(w, http.StatusNotFound, map[string]string{"error": "no runner " + r.PathValue("name")})
			case err != nil:
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			default:
				writeJSON(w, http.StatusOK, map[string]string{"revoked": r.PathValue("name")})
			}
		}),
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Statuses lists the registered runners with what this bridge knows of
// their connections.
func (h *Hub) Statuses(ctx context.Context) ([]Status, error) {
	recs, err := List(ctx, h.o.Store)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Status, 0, len(recs))
	for _, rec := range recs {
		s := Status{Name: rec.Name, Created: rec.Created, LastContact: rec.LastContact}
		for a, r := range h.o.Hosts {
			if r == rec.Name {
				s.Agents = append(s.Agents, a)
			}
		}
		slices.Sort(s.Agents)
		if x := h.host[rec.Name]; x != nil {
			s.Connected, s.Away, s.Turns = x.c != nil, x.gone, len(x.turns)
			if x.c != nil || x.lastSeen.After(s.LastContact) {
				s.LastContact = x.lastSeen
			}
		}
		out = append(out, s)
	}
	return out, nil
}
