package feishu_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/roombridge/roombridge/chat"
)

// TestP2PChatSpacedUnderOneKey: messages to an approver (Direct, by
// open_id) and replies in the topic of a card sent there go into one p2p
// chat, and are spaced as one chat's: Feishu's 5 a second into it are
// never exceeded (before: the direct messages were spaced under the
// user, the replies under the chat, and together they went twice as fast
// and were rate limited).
func TestP2PChatSpacedUnderOneKey(t *testing.T) {
	b := newBare(t, nil)
	ctx := b.ctx()
	root, err := b.conn.Direct(ctx, approver, chat.Message{Text: "first", IdempotencyKey: "dm-0"})
	if err != nil {
		t.Fatal(err)
	}
	thread := chat.ThreadRef{Surface: chat.Feishu, Channel: root.Channel, ID: root.ID}
	const each = 6
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for i := range each {
		wg.Go(func() {
			_, err := b.conn.Direct(ctx, approver, chat.Message{Text: "dm", IdempotencyKey: fmt.Sprintf("dm-%d", i+1)})
			errs <- err
		})
		wg.Go(func() {
			_, err := b.conn.Reply(ctx, thread, chat.Message{Text: "reply", IdempotencyKey: fmt.Sprintf("re-%d", i)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a send into the p2p chat: %v", err)
		}
	}
	if n := b.fake.RateLimited(); n != 0 {
		t.Errorf("the p2p chat was rate limited %d times, want never", n)
	}
}
