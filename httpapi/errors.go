package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/delegation"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/rooms"
	"github.com/roombridge/roombridge/store"
)

// RetryAfter is what a 429 or a 503 of a store that cannot be reached tells
// the caller to wait (the Retry-After header).
const RetryAfter = 5 * time.Second

// outcome is how one error is answered.
type outcome struct {
	status int
	// msg is what the caller reads; "" means the error's text is internal
	// (a store's, which may name a server path): the caller reads a
	// reference and the log has the rest.
	msg   string
	retry bool // set Retry-After
}

// classify maps an error to its answer, by kind: the one place that does.
// The store's kinds come first, since domain errors wrap them.
func classify(err error) outcome {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return outcome{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body over %d bytes (the API's fixed limit)", mbe.Limit)}
	case errors.Is(err, requests.ErrTooLarge): // names the bound and its key (limits.request_bytes)
		return outcome{status: http.StatusRequestEntityTooLarge, msg: strings.TrimPrefix(err.Error(), "requests: ")}
	case errors.Is(err, store.ErrTooLarge):
		return outcome{status: http.StatusRequestEntityTooLarge, msg: "too large for one store transaction (etcd: 1 MiB and 128 operations at most); send less at once"}
	case errors.Is(err, store.ErrFull):
		return outcome{status: http.StatusInsufficientStorage, msg: "the store is full: nothing was written; retry once space was freed"}
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrClosed):
		return outcome{status: http.StatusServiceUnavailable, msg: "the store is unreachable: nothing was changed; retry later", retry: true}
	case errors.Is(err, store.ErrRestoring):
		return outcome{status: http.StatusServiceUnavailable, msg: strings.TrimPrefix(store.ErrRestoring.Error(), "store: ")}
	case errors.Is(err, store.ErrFenced): // HA: a follower; ask the leader (the one /readyz calls ready)
		return outcome{status: http.StatusServiceUnavailable, msg: "not the leader: this instance is fenced; ask the instance /readyz calls ready"}
	case errors.Is(err, context.Canceled):
		return outcome{status: http.StatusServiceUnavailable, msg: "the call was cancelled (the bridge is stopping, or the caller went away)", retry: true}
	case errors.Is(err, requests.ErrQueueFull):
		return outcome{status: http.StatusTooManyRequests, msg: err.Error(), retry: true}
	case errors.Is(err, requests.ErrBadID), errors.Is(err, approvals.ErrBadID), errors.Is(err, approvals.ErrBadUser),
		errors.Is(err, approvals.ErrBadAnswer):
		return outcome{status: http.StatusBadRequest, msg: err.Error()}
	case errors.Is(err, requests.ErrUnknown), errors.Is(err, approvals.ErrUnknown), errors.Is(err, approvals.ErrUnknownRoom),
		errors.Is(err, delegation.ErrNoTask):
		return outcome{status: http.StatusNotFound, msg: err.Error()}
	case errors.Is(err, approvals.ErrDecided), errors.Is(err, delegation.ErrTaskEnded), errors.Is(err, delegation.ErrTaskRunning),
		errors.Is(err, requests.ErrIllegalTransition):
		return outcome{status: http.StatusConflict, msg: err.Error()}
	case errors.Is(err, rooms.ErrForbidden):
		return outcome{status: http.StatusForbidden, msg: err.Error()}
	}
	return outcome{status: http.StatusInternalServerError}
}

// fail answers err by its kind (classify). An internal error is logged
// with a reference the answer carries, never shown.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	o := classify(err)
	if o.retry {
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	}
	if o.status >= 500 {
		ref := newRef()
		s.log.ErrorContext(r.Context(), "api call failed", "method", r.Method, "path", clipPath(r.URL.Path),
			"request_id", r.PathValue("id"), "ref", ref, "status", o.status, "error", err)
		if o.msg == "" {
			o.msg = "internal error"
		}
		o.msg += " (ref " + ref + " in the bridge's log)"
	}
	writeError(w, o.status, o.msg)
}

// newRef returns a short random reference that ties an answer to its log
// line.
func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
