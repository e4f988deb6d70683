package requests_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// genRequest generates requests with any value in every field (all of
// them set when full, with times in UTC, as the records' are).
func genRequest(full bool) *rapid.Generator[requests.Request] {
	str, at := jsonxtest.String(), jsonxtest.Time()
	maybe, maybeAt := jsonxtest.MaybeZero[string], jsonxtest.MaybeZero[time.Time]
	id := rapid.Custom(func(t *rapid.T) requests.ID { return genID(t, "id") })
	maybeID, maybeN := jsonxtest.MaybeZero(id), jsonxtest.MaybeZero(rapid.Int())
	state := rapid.IntRange(0, 9) // 1 to 7 are states
	if full {
		state = rapid.IntRange(1, 7)
		at = rapid.Map(at, time.Time.UTC)
		maybe = func(*rapid.Generator[string]) *rapid.Generator[string] {
			return rapid.StringMatching(`[a-zA-Z0-9 ./:é-]{1,8}`)
		}
		maybeAt = func(*rapid.Generator[time.Time]) *rapid.Generator[time.Time] { return at }
		maybeID, maybeN = id, rapid.IntRange(1, 100)
	}
	usage := rapid.Custom(func(t *rapid.T) requests.Usage {
		return requests.Usage{Turns: rapid.IntRange(0, 3).Draw(t, "turns"), InputTokens: rapid.Int64().Draw(t, "in"),
			CostUSD: rapid.OneOf(rapid.Float64(), rapid.Just(1e-7), rapid.Just(2.5e21)).Draw(t, "cost")}
	})
	return rapid.Custom(func(t *rapid.T) requests.Request {
		r := requests.Request{
			ID: maybeID.Draw(t, "id"), Owner: maybe(str).Draw(t, "owner"), Agent: maybe(str).Draw(t, "agent"),
			Room: maybe(str).Draw(t, "room"), Surface: maybe(str).Draw(t, "surface"), Requester: maybe(str).Draw(t, "requester"),
			Ask: maybe(str).Draw(t, "ask"), State: requests.State(state.Draw(t, "state")),
			Version: rapid.Int64Range(1, 1<<62).Draw(t, "version"), RetryOf: maybeID.Draw(t, "retry_of"),
			References:  rapid.SliceOfN(id, map[bool]int{true: 1, false: 0}[full], 3).Draw(t, "references"),
			DelegatedBy: maybeID.Draw(t, "delegated_by"), Session: maybe(str).Draw(t, "session"),
			CancelRequested: full || rapid.Bool().Draw(t, "cancel"), Progress: maybeN.Draw(t, "progress"),
			Activity: maybe(str).Draw(t, "activity"), Reason: maybe(str).Draw(t, "reason"), Result: maybe(str).Draw(t, "result"),
			Created: at.Draw(t, "created"), Updated: at.Draw(t, "updated"),
			StartedAt: maybeAt(at).Draw(t, "started_at"), EndedAt: maybeAt(at).Draw(t, "ended_at"),
		}
		if full {
			r.Usage = usage.Draw(t, "usage")
			r.Usage.Turns++
		} else {
			r.Usage = jsonxtest.MaybeZero(usage).Draw(t, "usage")
		}
		return r
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
