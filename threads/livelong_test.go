package threads_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/threads"
)

// bounded is a streamer whose live messages hold at most limit bytes (chat.LiveBound).
type bounded struct {
	*streamer
	limit int
}

func (b bounded) FitsLive(text string) bool { return len(text) <= b.limit }

// TestLiveAnswerTooLongFollows: a final answer too long for the live message closes it with a note
// saying so, and is posted as a reply of its own (which the connector splits or attaches), once.
func TestLiveAnswerTooLongFollows(t *testing.T) {
	f, s, r := liveFixture(t)
	b := bounded{streamer: s, limit: 10}
	l, stop := startLive(t, f, b)
	defer stop()
	f.d.Live = l
	l.Delta(r, "long ")
	waitShown(t, f, "the live text", func() bool { return s.live("live1") == "long " })
	answer := "long answer, longer than ten bytes"
	finish(t, f, r, answer)
	if got := s.closed(); !slices.Equal(got["live1"], []string{threads.LongAnswer}) || len(got) != 1 {
		t.Errorf("closes %v, want live1 closed once with the note", got)
	}
	replies := 0
	for _, c := range s.Calls() {
		if strings.HasPrefix(c, "reply") && strings.Contains(c, answer) {
			replies++
		}
	}
	if replies != 1 {
		t.Errorf("the answer was posted %d times, want once: %v", replies, s.Calls())
	}
}
