package requests_test

import (
	"encoding/json"
	"testing"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/requests"
)

// TestEncodeIsMarshal: a request's record is what json.Marshal writes,
// byte for byte, for any request (and an error where json.Marshal
// refuses one: a time out of its range, a dollar figure that is not a
// number).
func TestEncodeIsMarshal(t *testing.T) {
	str, at := jsonxtest.String(), jsonxtest.Time()
	maybe := jsonxtest.MaybeZero[string]
	id := rapid.Custom(func(t *rapid.T) requests.ID { return genID(t, "id") })
	usage := rapid.Custom(func(t *rapid.T) requests.Usage {
		return requests.Usage{Turns: rapid.IntRange(0, 3).Draw(t, "turns"), InputTokens: rapid.Int64().Draw(t, "in"),
			CostUSD: rapid.OneOf(rapid.Float64(), rapid.Just(1e-7), rapid.Just(2.5e21)).Draw(t, "cost")}
	})
	rapid.Check(t, func(t *rapid.T) {
		r := requests.Request{
			ID: jsonxtest.MaybeZero(id).Draw(t, "id"), Owner: str.Draw(t, "owner"), Agent: str.Draw(t, "agent"),
			Room: maybe(str).Draw(t, "room"), Surface: str.Draw(t, "surface"), Requester: str.Draw(t, "requester"),
			Ask: str.Draw(t, "ask"), State: requests.State(rapid.IntRange(0, 9).Draw(t, "state")),
			Version: rapid.Int64().Draw(t, "version"), RetryOf: jsonxtest.MaybeZero(id).Draw(t, "retry_of"),
			References:  rapid.SliceOfN(id, 0, 3).Draw(t, "references"),
			DelegatedBy: jsonxtest.MaybeZero(id).Draw(t, "delegated_by"), Session: maybe(str).Draw(t, "session"),
			CancelRequested: rapid.Bool().Draw(t, "cancel"), Progress: jsonxtest.MaybeZero(rapid.Int()).Draw(t, "progress"),
			Activity: maybe(str).Draw(t, "activity"), Reason: maybe(str).Draw(t, "reason"), Result: maybe(str).Draw(t, "result"),
			Created: at.Draw(t, "created"), Updated: at.Draw(t, "updated"),
			StartedAt: jsonxtest.MaybeZero(at).Draw(t, "started_at"), EndedAt: jsonxtest.MaybeZero(at).Draw(t, "ended_at"),
			Usage: jsonxtest.MaybeZero(usage).Draw(t, "usage"),
		}
		want, wantErr := json.Marshal(&r)
		got, err := requests.Encode(&r)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("Encode: %v, json.Marshal: %v", err, wantErr)
		}
		if string(got) != string(want) {
			t.Fatalf("Encode wrote\n%s\njson.Marshal\n%s", got, want)
		}
	})
}
