package console

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/roombridge/roombridge/chat"
)

// TestStatusPrintedOnceAndBounded: a message's status is printed when it
// changes, not again when an update repeats it; and the statuses
// remembered for that stay bounded however many messages a long run shows
// (found by cmd/bridge's TestSoak: one entry per message, never dropped,
// grew the heap with every request).
func TestStatusPrintedOnceAndBounded(t *testing.T) {
	var out bytes.Buffer
	c := New(strings.NewReader(""), &out, "main", "alice")
	ctx := context.Background()
	update := func(id, status string) {
		t.Helper()
		ref := chat.MessageRef{Surface: chat.Console, Channel: "main", ID: id}
		if err := c.Update(ctx, ref, chat.Message{Request: id, Kind: "parent", Card: &chat.Card{Status: status}}); err != nil {
			t.Fatal(err)
		}
	}
	update("R-1", "running")
	update("R-1", "running")
	update("R-1", "done")
	if got, want := out.String(), "   R-1 | status: running\n   R-1 | status: done\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	for i := range 3 * maxStatuses {
		update(fmt.Sprintf("R-%d", i+2), "done")
	}
	if n := len(c.status); n > maxStatuses {
		t.Errorf("%d statuses remembered, want at most %d", n, maxStatuses)
	}
}

// TestTasksAndDismissAreCommands: "tasks" and "dismiss ID" reach the core as
// chat.Command events of the room (the core answers them on every surface
// alike), and the answer is printed, multi-line answers indented.
func TestTasksAndDismissAreCommands(t *testing.T) {
	var out bytes.Buffer
	c := New(strings.NewReader("tasks\ndismiss T-1\n"), &out, "main", "alice")
	var got []chat.Event
	h := chat.HandlerFunc(func(_ context.Context, ev chat.Event) chat.Response {
		got = append(got, ev)
		if ev.Text == "tasks" {
			return chat.Response{Text: "1 background task(s) running:\nT-1 long", Answer: true}
		}
		return chat.Response{Text: "no such task", Error: true}
	})
	if err := c.Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	want := []chat.Event{
		{Kind: chat.Command, Surface: chat.Console, Channel: "main", User: "console:alice", Text: "tasks"},
		{Kind: chat.Command, Surface: chat.Console, Channel: "main", User: "console:alice", Text: "dismiss T-1"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %+v, want %+v", got, want)
	}
	if s := out.String(); !strings.Contains(s, "* 1 background task(s) running:\n  T-1 long\n! no such task\n") {
		t.Errorf("printed %q", s)
	}
}
