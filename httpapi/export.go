package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roombridge/roombridge/audit"
	"github.com/roombridge/roombridge/requests"
)

// ParseTime accepts RFC 3339 times and YYYY-MM-DD days (UTC).
func ParseTime(key, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: %q is not a time (want RFC 3339 or YYYY-MM-DD)", key, v)
}

func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := ParseTime("since", q.Get("since"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	until, err := ParseTime("until", q.Get("until"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	format, err := audit.ParseFormat(q.Get("format"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "format: "+err.Error())
		return
	}
	query := audit.Query{Since: since, Until: until}
	if rid := q.Get("request"); rid != "" {
		id, err := requests.ParseRef(rid, s.svc.Clock().Now())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		query.RequestID = id.String()
	}
	probe, cancel := context.WithTimeout(r.Context(), ReadWait)
	n, err := audit.Count(probe, s.svc.Store())
	cancel()
	if err != nil { // nothing sent yet: an honest status
		s.fail(w, r, err)
		return
	}
	if format == audit.CSV {
		w.Header().Set("Content-Type", "text/csv")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("X-Audit-Total", strconv.FormatUint(n, 10))
	w.Header().Set("Trailer", AuditErrorTrailer)
	sent := &sentWriter{w: w}
	n, err = audit.Export(r.Context(), s.svc.Store(), query, format, sent, nil)
	if err == nil {
		return
	}
	if sent.n == 0 {
		s.fail(w, r, err)
		return
	}
	ref := newRef()
	s.log.ErrorContext(r.Context(), "audit export failed mid-stream", "ref", ref, "records", n, "error", err)
	msg := fmt.Sprintf("export incomplete: the store failed after %d bytes (ref %s in the bridge's log); export again", sent.n, ref)
	w.Header().Set(AuditErrorTrailer, msg)
	_, _ = io.WriteString(w, incompleteLine(format, sent.last, msg))
}

// AuditErrorTrailer is the trailer of an audit export that failed after its
// first byte; its last line says so too (incompleteLine).
const AuditErrorTrailer = "X-Audit-Error"

// IncompleteMarker starts the last line (JSONL: the error field's value;
// CSV: the seq column) of an export that failed part way.
const IncompleteMarker = "export incomplete"

// incompleteLine is the last line of a failed export, after a newline if
// the export was cut inside a line.
func incompleteLine(f audit.Format, last byte, msg string) string {
	nl := ""
	if last != '\n' {
		nl = "\n"
	}
	if f == audit.CSV {
		return nl + IncompleteMarker + strings.Repeat(",", len(audit.CSVHeader)-2) + "," + strconv.Quote(msg) + "\n"
	}
	b, _ := json.Marshal(map[string]any{"error": msg, "incomplete": true})
	return nl + string(b) + "\n"
}

// sentWriter counts what reached the response, and its last byte.
type sentWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (s *sentWriter) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	if n > 0 {
		s.n += int64(n)
		s.last = b[n-1]
	}
	return n, err
}
