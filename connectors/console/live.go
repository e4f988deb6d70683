package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/roombridge/roombridge/chat"
	"github.com/roombridge/roombridge/internal/clip"
)

var _ chat.Streamer = (*Connector)(nil)

// livePace is how often the console rewrites a live line.
const livePace = 100 * time.Millisecond

// liveWidth bounds the live line: its tail is shown.
const liveWidth = 100

// StreamPace implements chat.Streamer.
func (c *Connector) StreamPace() time.Duration { return livePace }

// OpenStream implements chat.Streamer: the live text is one line of the
// thread, rewritten in place.
func (c *Connector) OpenStream(_ context.Context, t chat.ThreadRef, m chat.Message) (chat.MessageRef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return chat.MessageRef{Surface: chat.Console, Channel: t.Channel, ID: fmt.Sprintf("%s/live/%d", t.ID, c.seq)}, nil
}

// AppendStream implements chat.Streamer: tool steps are lines; the text
// rewrites the live line (its last liveWidth characters, on one line).
func (c *Connector) AppendStream(_ context.Context, ref chat.MessageRef, u chat.StreamUpdate) error {
	id, _, _ := strings.Cut(ref.ID, "/")
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range u.Steps {
		c.endLive()
		switch s.Status {
		case chat.StepStarted:
			fmt.Fprintf(c.out, "   %s | tool %s …\n", id, s.Name)
		default:
			fmt.Fprintf(c.out, "   %s | tool %s %s (%s)\n", id, s.Name, s.Status, s.Took.Round(time.Millisecond))
		}
	}
	if u.Delta == "" {
		return nil // nothing new written: the line stands (or a tool line ended it)
	}
	tail := []rune(strings.Join(strings.Fields(u.Text), " "))
	if len(tail) > liveWidth {
		tail = append([]rune(clip.Marker), tail[len(tail)-liveWidth:]...)
	}
	fmt.Fprintf(c.out, "\r\033[K   %s | writing: %s", id, string(tail))
	c.live = true
	return nil
}

// CloseStream implements chat.Streamer: the live line gives way to the
// final text.
func (c *Connector) CloseStream(_ context.Context, ref chat.MessageRef, m chat.Message) error {
	id, _, _ := strings.Cut(ref.ID, "/")
	c.mu.Lock()
	if c.live {
		fmt.Fprint(c.out, "\r\033[K")
		c.live = false
	}
	c.mu.Unlock()
	c.printCard(id, m)
	return nil
}

// endLive ends the live line, so that the next line starts anew (under
// c.mu).
func (c *Connector) endLive() {
	if c.live {
		fmt.Fprintln(c.out)
		c.live = false
	}
}
