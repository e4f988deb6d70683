package delegation

import (
	"testing"
	"time"

	"github.com/roombridge/roombridge/requests"
)

// TestShortRef: a status names a request of the day it is shown by its
// short form, any other by its full ID.
func TestShortRef(t *testing.T) {
	now := time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)
	if got := shortRef(requests.NewID(now, 8), now); got != "R-08" {
		t.Errorf("today's: %q", got)
	}
	if got := shortRef(requests.NewID(now.Add(-24*time.Hour), 8), now); got != "R20261128-08" {
		t.Errorf("yesterday's: %q", got)
	}
	if got := shortRef(requests.NewID(now, 123), now.Add(2*time.Minute)); got != "R20261129-123" {
		t.Errorf("after midnight UTC: %q", got)
	}
}
