package slacktest

import (
	"net/http"
	"time"
)

type limit struct {
	key string
	rate
}

// limitLocked applies every limit atomically with GCRA (a token bucket of size burst refilled one per
// every): either all admit the call and are charged, or the call gets a 429 with the longest wait.
func (s *Server) limitLocked(now time.Time, ls ...limit) (reply, bool) {
	var wait time.Duration
	next := make([]time.Time, len(ls))
	for i, l := range ls {
		if l.every <= 0 {
			continue
		}
		tat := s.tat[l.key]
		if tat.Before(now) {
			tat = now
		}
		allowAt := tat.Add(-time.Duration(l.burst-1) * l.every)
		wait = max(wait, allowAt.Sub(now))
		next[i] = tat.Add(l.every)
	}
	if wait > 0 {
		return reply{status: http.StatusTooManyRequests, retryAfter: max(wait, time.Second)}, false
	}
	for i, l := range ls {
		if l.every > 0 {
			s.tat[l.key] = next[i]
		}
	}
	return reply{}, true
}
