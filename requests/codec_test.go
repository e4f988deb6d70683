package requests_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// genRequest generates requests with any value in every field (all of
// them set when full, with times in UTC, as the records' are).
func genRequest(full bool) *rapid.Generator[requests.Request] {
	str, at := jsonxtest.Text(full), jsonxtest.Instant(full)
	opt, optAt := jsonxtest.Optional(str, full), jsonxtest.Optional(at, full)
	id := rapid.Custom(func(t *rapid.T) requests.ID { return genID(t, "id") })
	optID, n := jsonxtest.Optional(id, full), jsonxtest.Int64(full)
	state := rapid.IntRange(0, 9) // 1 to 7 are states
	if full {
		state = rapid.IntRange(1, 7)
	}
	usage := jsonxtest.Optional(rapid.Custom(func(t *rapid.T) requests.Usage {
		return requests.Usage{Turns: int(n.Draw(t, "turns")), InputTokens: n.Draw(t, "in"), OutputTokens: n.Draw(t, "out"),
			CacheReadTokens: n.Draw(t, "cache_read"), CacheWriteTokens: n.Draw(t, "cache_write"),
			CostUSD: rapid.OneOf(rapid.Float64(), rapid.Just(1e-7), rapid.Just(2.5e21)).Filter(func(f float64) bool { return !full || f != 0 }).Draw(t, "cost")}
	}), full)
	return rapid.Custom(func(t *rapid.T) requests.Request {
		return requests.Request{
			ID: optID.Draw(t, "id"), Owner: str.Draw(t, "owner"), Agent: str.Draw(t, "agent"),
			Room: opt.Draw(t, "room"), Surface: str.Draw(t, "surface"), Requester: str.Draw(t, "requester"),
			Ask: str.Draw(t, "ask"), State: requests.State(state.Draw(t, "state")),
			Version: n.Draw(t, "version"), RetryOf: optID.Draw(t, "retry_of"),
			References:  rapid.SliceOfN(id, jsonxtest.Several(full), 3).Draw(t, "references"),
			DelegatedBy: optID.Draw(t, "delegated_by"), Session: opt.Draw(t, "session"),
			CancelRequested: full || rapid.Bool().Draw(t, "cancel"), Progress: int(jsonxtest.Optional(n, full).Draw(t, "progress")),
			Activity: opt.Draw(t, "activity"), Reason: opt.Draw(t, "reason"), Result: opt.Draw(t, "result"),
			Created: at.Draw(t, "created"), Updated: at.Draw(t, "updated"),
			StartedAt: optAt.Draw(t, "started_at"), EndedAt: optAt.Draw(t, "ended_at"), Usage: usage.Draw(t, "usage"),
		}
	})
}

// TestEncodeIsMarshal: a request's record is what json.Marshal writes,
// byte for byte, for any request (and an error where json.Marshal
// refuses one: a time out of its range, a dollar figure that is not a
// number).
func TestEncodeIsMarshal(t *testing.T) {
	jsonxtest.EncodesAsMarshal(t, genRequest(false), requests.Encode)
}

// TestCodecCoversEveryField: with every field of a request set, the
// record holds each of them: a field added to the type but not to encode
// fails here (and a field the generator leaves out fails first).
func TestCodecCoversEveryField(t *testing.T) {
	jsonxtest.KeepsEveryField(t, genRequest(true), requests.Encode, store.Decode)
}

// genRecorded generates requests without usage: the records DecodeRecord
// reads (a dollar figure is left to the general decoder).
func genRecorded() *rapid.Generator[requests.Request] {
	return rapid.Map(genRequest(false), func(r requests.Request) requests.Request {
		r.Usage = requests.Usage{}
		return r
	})
}

// TestDecodeRecordIsUnmarshal: every record encode writes of a request
// without usage is decoded without reflection (DecodeRecord, store.Decode's
// fast path) into the value json.Unmarshal gives; one with usage is left
// to the general decoder (TestCodecCoversEveryField decodes it).
func TestDecodeRecordIsUnmarshal(t *testing.T) {
	jsonxtest.DecodesAsUnmarshal(t, genRecorded(), requests.Encode, (*requests.Request).DecodeRecord)
	r := genRequest(true).Example(1)
	b, err := requests.Encode(&r)
	if err != nil {
		t.Fatal(err)
	}
	if new(requests.Request).DecodeRecord(b) {
		t.Fatalf("%s: decoded, usage and all", b)
	}
}

// FuzzDecodeRecord: whatever DecodeRecord decodes, json.Unmarshal decodes
// into the same value; what it does not decode, it leaves zero (for
// store.Decode to decode with the general decoder).
func FuzzDecodeRecord(f *testing.F) {
	var seeds [][]byte
	for seed := range 8 {
		r := genRecorded().Example(seed)
		if b, err := requests.Encode(&r); err == nil {
			seeds = append(seeds, b)
		}
	}
	jsonxtest.FuzzDecoder(f, seeds, (*requests.Request).DecodeRecord)
}
