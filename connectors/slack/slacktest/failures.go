package slacktest

import (
	"net/http"
	"time"
)

// Failures a test injects, per method: an answer in place of the call's
// (FailNext, FailNextError), or the call's answer lost (LoseNextAnswer).

// FailNext makes the next call of method fail with HTTP status, before any auth or limit check. For 429
// a positive retryAfter is sent as Retry-After (rounded up to seconds); without that header slack-go
// returns StatusCodeError, not RateLimitedError. Failures queue per method.
func (s *Server) FailNext(method string, status int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[method] = append(s.failures[method], failure{status: status, retryAfter: retryAfter})
}

// LoseNextAnswer makes the next call of method be carried out as usual (a message posted, a stream
// started), and then its answer lost: the fake closes the connection without answering, so the client
// sees a transport error (io.EOF), as when the network fails on the way back. Losses queue per method.
func (s *Server) LoseNextAnswer(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lose[method]++
}

// FailNextError makes the next call of method answer HTTP 200 {"ok":false,"error":slackErr}.
func (s *Server) FailNextError(method, slackErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[method] = append(s.failures[method], failure{status: http.StatusOK, slackErr: slackErr})
}
