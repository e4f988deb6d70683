package requests_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/roombridge/roombridge/requests"
)

// TestClip: a text over the bound is cut to at most the bound, at a
// character boundary, with a marker naming the key; a text within it is
// kept whole.
func TestClip(t *testing.T) {
	s := requests.NewService(nil, nil, "acme", nil)
	for _, n := range []int{0, 1 << 10, 40} {
		s.SetMaxBytes(n)
		limit := s.MaxBytes()
		if got := s.Clip("short"); got != "short" {
			t.Errorf("bound %d: %q cut to %q", limit, "short", got)
		}
		got := s.Clip(strings.Repeat("é", limit))
		if len(got) > limit || !utf8.ValidString(got) || !strings.HasPrefix(got, "éé") {
			t.Errorf("bound %d: cut to %d bytes (valid UTF-8 %v)", limit, len(got), utf8.ValidString(got))
		}
		if limit > 100 && !strings.Contains(got, requests.LimitKey) {
			t.Errorf("bound %d: no marker naming %s in %q", limit, requests.LimitKey, got[len(got)-60:])
		}
	}
}
