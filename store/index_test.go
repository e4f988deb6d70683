package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// An effect is stored exactly as json.Marshal encodes it (its payload,
// compact already, as it is): same bytes, whatever its strings and times,
// prepared ahead of its transaction or not.
func TestEncodeEffectIsJSONMarshal(t *testing.T) {
	// encodeEffect writes Effect's 9 fields by hand (the third case below
	// sets them all): a new field must be taught to it, and set here.
	if n := reflect.TypeFor[Effect]().NumField(); n != 9 {
		t.Fatalf("Effect has %d fields, encodeEffect writes 9: add the new one to encodeEffect and to this test", n)
	}
	at := time.Date(2026, 12, 1, 11, 30, 5, 123456789, time.FixedZone("x", 5*3600+1800))
	for _, e := range []Effect{
		{},
		{Seq: 1, Queue: "slack/R20261201-01", Payload: json.RawMessage(`{"op":"reply","message":{"text":"hé \u003c\u0026"}}`), Created: at.UTC()},
		{Seq: 1<<64 - 1, Queue: `q "quoted" \ back`, Coalesce: "slack/parent/R-1", Payload: json.RawMessage(`"x"`),
			Attempts: 7, NotBefore: at, LastError: "slack: chat.update: <ratelimited> & \x01 \u2028 é \xff", Created: at, Span: 5},
		{Queue: "日本", Attempts: -1, LastError: "\x7f", Created: time.Unix(0, 1)},
	} {
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := encodeEffect(&e); err != nil || string(got) != string(want) {
			t.Errorf("encodeEffect:\n got %s (%v)\nwant %s", got, err, want)
		}
		// Prepared (without its number), then given its number.
		p, err := PrepareEffect(e)
		if got := p.rec.With(e.Seq); err != nil || string(got) != string(want) {
			t.Errorf("PrepareEffect:\n got %s (%v)\nwant %s", got, err, want)
		}
	}
	if _, err := PrepareEffect(Effect{Span: -1}); err == nil {
		t.Error("an effect of span -1 was prepared")
	}
	if err := (PreparedEffect{}).EnqueueTx(nil); err == nil {
		t.Error("an effect not prepared was enqueued")
	}
}

// The index keys are built without fmt, and are what fmt built: the keys of
// a store written by an older bridge are found again.
func TestKeysAreWhatFmtWrote(t *testing.T) {
	for _, ms := range []int64{0, 1, 1795953600000, 9999999999999, 12345678901234, -1, -1795953600000} {
		due := time.UnixMilli(ms)
		if got, want := timerKey("approval", due, "R-1/0000"), fmt.Sprintf("%s/%013d/%s", "approval", ms, "R-1/0000"); got != want {
			t.Errorf("timerKey(%d) = %q, want %q", ms, got, want)
		}
	}
	for _, seq := range []uint64{0, 1, 42, 1<<63 + 5, 1<<64 - 1} {
		if got, want := outboxKey(seq), fmt.Sprintf("%020d", seq); got != want {
			t.Errorf("outboxKey(%d) = %q, want %q", seq, got, want)
		}
	}
}
