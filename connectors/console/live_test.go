package console

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// TestLiveLine: the live text is one line rewritten in place (its tail),
// tools are lines of their own, any other line ends the live one first, and
// the close replaces the live line with the final answer.
func TestLiveLine(t *testing.T) {
	var out bytes.Buffer
	c := New(strings.NewReader(""), &out, "main", "alice")
	ctx := context.Background()
	ref, err := c.OpenStream(ctx, chat.ThreadRef{Surface: chat.Console, Channel: "main", ID: "R-1"}, chat.Message{Request: "R-1"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []chat.ToolStep{{ID: "t1", Name: "build", Status: chat.StepStarted}}
	if err := c.AppendStream(ctx, ref, chat.StreamUpdate{Delta: "hello", Text: "hello", Steps: steps}); err != nil {
		t.Fatal(err)
	}
	if err := c.AppendStream(ctx, ref, chat.StreamUpdate{Delta: " world", Text: "hello world",
		Steps: []chat.ToolStep{{ID: "t1", Name: "build", Status: chat.StepDone, Took: 1500 * time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	c.printf("   R-2 | something else")
	if err := c.CloseStream(ctx, ref, chat.Message{Request: "R-1", Kind: "final", Text: "hello world!"}); err != nil {
		t.Fatal(err)
	}
	want := "   R-1 | tool build …\n" +
		"\r\033[K   R-1 | writing: hello" +
		"\n   R-1 | tool build complete (1.5s)\n" +
		"\r\033[K   R-1 | writing: hello world" +
		"\n   R-2 | something else\n" +
		"   R-1 | final: hello world!\n"
	if got := out.String(); got != want {
		t.Errorf("printed %q\nwant    %q", got, want)
	}
}
