package feishu_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/roombridge/roombridge/chat"
)

// The recorded im.message.receive_v1 and card.action.trigger (card 2.0)
// payloads (testdata/platforms/feishu) over the long connection, end to end:
// the fake pushes each in an event frame to the real SDK client of a running
// connector, which must acknowledge it after the core got what it carries
// (or nothing, for what is not the bridge's). The SDK's templates are filled
// as their source tests fill them (see the README).

func corpusPayload(t *testing.T, name string, args ...any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "platforms", "feishu", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	if len(args) > 0 {
		b = fmt.Appendf(nil, string(b), args...)
	}
	return b
}

// pushRaw pushes payload in an event frame and waits for its ack.
func (b *bare) pushRaw(payload []byte) {
	b.t.Helper()
	id, err := b.fake.PushEvent(b.ctx(), payload)
	if err != nil {
		b.t.Fatal(err)
	}
	b.wait("the ack", func() bool { return len(b.fake.Responses(id)) > 0 })
	if r := b.fake.Responses(id)[0]; r.StatusCode != http.StatusOK {
		b.t.Fatalf("frame %s answered %d", id, r.StatusCode)
	}
}

func TestCorpusOverTheLongConnection(t *testing.T) {
	b := newBare(t, nil)

	// A group message that mentions no one and is in no topic: chatter.
	b.pushRaw(corpusPayload(t, "events/im.message.receive_v1.group.tmpl.json", "evt_1", time.Now().UnixMilli(), "om_same_123"))
	if evs := b.rec.all(); len(evs) > 0 {
		t.Fatalf("unaddressed group chatter reached the core: %+v", evs)
	}

	// The documentation's sample: a reply in a topic, mentioning Tom (not
	// the bot).
	b.pushRaw(corpusPayload(t, "events/im.message.receive_v1.doc_sample.json"))
	chatID := "oc_5ce6d572455d361153b7xx51da133945"
	want := []chat.Event{{Kind: chat.Reply, Surface: chat.Feishu, ID: "5e3702a84e847582be8db7fb73283c02",
		Channel: chatID, User: "feishu:ou_84aad35d084aa403a838cf73ee18467", Text: "@Tom hello", Message: "om_5ce6d572455d361153b7cb51da133945",
		Thread: &chat.ThreadRef{Surface: chat.Feishu, Channel: chatID, ID: "om_5ce6d572455d361153b7cb5xxfsdfsdfdsf"}}}
	if evs := b.rec.all(); !reflect.DeepEqual(evs, want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}

	// A card 2.0 click on a button that is not the bridge's: refused with a
	// toast, in the answer format of card.action.trigger.
	data, err := b.fake.PushCardAction(b.ctx(), corpusPayload(t, "cards/card.action.trigger.v2.tmpl.json", "evt_card_1", "om_card_1", "oc_card_1"))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Toast struct {
			Type    string `json:"type"`
			Content string `json:"content"`
		} `json:"toast"`
	}
	if err := json.Unmarshal(data, &answer); err != nil || answer.Toast.Type != "error" ||
		answer.Toast.Content != "This button is not one of the bridge's." {
		t.Fatalf("answer %s (%v); want an error toast saying the button is not the bridge's", data, err)
	}
	if evs := b.rec.all(); len(evs) != 1 {
		t.Fatalf("the foreign click reached the core: %+v", evs[1:])
	}
}
