package requests

import (
	"errors"
	"fmt"

	"github.com/roombridge/roombridge/internal/clip"
)

// DefaultMaxBytes is the bound of each text a request carries when
// SetMaxBytes was not called (config's limits.request_bytes default).
const DefaultMaxBytes = 32 << 10

// LimitKey is the configuration key of the bound, named in refusals.
const LimitKey = "limits.request_bytes"

// ErrTooLarge is matched (errors.Is) by a *TooLargeError.
var ErrTooLarge = errors.New("requests: too large")

// TooLargeError refuses a text over the bound: it names the bound and the
// key that sets it.
type TooLargeError struct {
	What  string // "the ask"
	Size  int    // bytes
	Limit int    // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("requests: %s is %d bytes, over the limit of %d bytes (%s)", e.What, e.Size, e.Limit, LimitKey)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// SetMaxBytes sets the bound of each text a request carries (the ask, its
// result, its agent's messages, its tasks' output). Call it before the
// service is used; n <= 0 keeps DefaultMaxBytes.
func (s *Service) SetMaxBytes(n int) {
	if n > 0 {
		s.maxBytes = n
	}
}

// MaxBytes returns the bound of each text a request carries.
func (s *Service) MaxBytes() int {
	if s.maxBytes <= 0 {
		return DefaultMaxBytes
	}
	return s.maxBytes
}

// Clip returns text cut to MaxBytes, ending with a marker that says it was
// cut and by which bound, when it is longer; else text unchanged. Results,
// messages and task outputs are stored through it: work that was done is
// never refused for its size.
func (s *Service) Clip(text string) string {
	n := s.MaxBytes()
	if len(text) <= n {
		return text
	}
	note := fmt.Sprintf("\n[cut: %d bytes, over %s = %d]", len(text), LimitKey, n)
	if len(note) >= n/2 {
		return clip.Text(text, n, clip.Bytes) // a bound too small for the note
	}
	return clip.Text(text, n-len(note), clip.Bytes) + note
}

// checkAsk refuses an ask over the bound.
func (s *Service) checkAsk(text string) error {
	if len(text) > s.MaxBytes() {
		return &TooLargeError{What: "the ask", Size: len(text), Limit: s.MaxBytes()}
	}
	return nil
}
