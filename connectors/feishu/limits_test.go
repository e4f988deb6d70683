package feishu

import (
	"testing"
	"time"
)

// Sends into a chat start spacing apart and at least chatFloor after the
// previous answer, so any perSecond+1 in a row arrive at least
// (perSecond-1)·spacing + chatFloor apart: that must exceed a second (with
// 5 % to spare), for every limit a config may give, and the floor never
// exceeds the spacing (at one a second it is spacing from the end).
func TestChatFloorKeepsAnyPerSecondPlusOneOverASecond(t *testing.T) {
	for n := 1; n <= 200; n++ {
		every, floor := spacing(n), chatFloor(n)
		if span := time.Duration(n-1)*every + floor; span < 1050*time.Millisecond-time.Microsecond {
			t.Errorf("%d/s: %d sends in a row may arrive within %s", n, n+1, span)
		}
		if floor > every || floor < every*2/3 {
			t.Errorf("%d/s: floor %s, spacing %s", n, floor, every)
		}
	}
	if got := chatFloor(DefaultLimits.PerChat); got != 170*time.Millisecond {
		t.Errorf("Feishu's 5/s: floor %s, want 170ms", got)
	}
}
