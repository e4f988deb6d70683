package rooms_test

import (
	"context"
	"testing"

	"github.com/roombridge/roombridge/chat"
)

// A failure of ours is not a refusal: with the store gone, an ask is
// answered Retry (the platform is to deliver it again) with nothing to tell
// the asker, while a refusal of the ask itself stays a refusal.
func TestStoreFailureIsRetriedNotRefused(t *testing.T) {
	ctx := context.Background()
	f := newRoomFixture(t)
	unbound := chat.Event{Kind: chat.Ask, Surface: chat.Console, ID: "ev1", Channel: "elsewhere", User: alice, Text: "coder hi"}
	if r := f.rt.Handle(ctx, unbound); !r.Error || r.Retry {
		t.Errorf("an ask in a channel of no room: %+v, want a refusal", r)
	}
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	ask := chat.Event{Kind: chat.Ask, Surface: chat.Console, ID: "ev2", Channel: "main", User: alice, Text: "coder hi"}
	if r := f.rt.Handle(ctx, ask); !r.Retry || r.Error || r.Text != "" {
		t.Errorf("an ask with the store closed: %+v, want Retry with nothing to tell", r)
	}
}
