package approvals_test

import (
	"encoding/json"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/requests"
)

// TestEncodeIsMarshal: an approval's record is what json.Marshal writes,
// byte for byte, for any approval (and an error where json.Marshal
// refuses one: a time out of its range).
func TestEncodeIsMarshal(t *testing.T) {
	str, at := jsonxtest.String(), jsonxtest.Time()
	maybe := jsonxtest.MaybeZero[string]
	id := rapid.Custom(func(t *rapid.T) requests.ID {
		day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rapid.IntRange(0, 36524).Draw(t, "day"))
		return requests.NewID(day, rapid.IntRange(1, 999_999_999).Draw(t, "n"))
	})
	copies := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) approvals.Copy {
		return approvals.Copy{Surface: str.Draw(t, "surface"), Request: str.Draw(t, "request"), Ref: str.Draw(t, "ref")}
	}), 0, 3)
	rapid.Check(t, func(t *rapid.T) {
		a := approvals.Approval{
			ID: str.Draw(t, "id"), Kind: approvals.Kind(str.Draw(t, "kind")), RequestID: jsonxtest.MaybeZero(id).Draw(t, "request_id"),
			Root: jsonxtest.MaybeZero(id).Draw(t, "root"), RootRoom: maybe(str).Draw(t, "root_room"),
			Room: str.Draw(t, "room"), Agent: str.Draw(t, "agent"), Requester: str.Draw(t, "requester"),
			Action: str.Draw(t, "action"), Asker: str.Draw(t, "asker"), State: approvals.State(str.Draw(t, "state")),
			Version: rapid.Int64().Draw(t, "version"), DecidedBy: maybe(str).Draw(t, "decided_by"),
			Surface: maybe(str).Draw(t, "surface"), DecidedAt: jsonxtest.MaybeZero(at).Draw(t, "decided_at"),
			Answer: maybe(str).Draw(t, "answer"), Reason: maybe(str).Draw(t, "reason"),
			Created: at.Draw(t, "created"), ExpiresAt: at.Draw(t, "expires_at"), TTL: time.Duration(rapid.Int64().Draw(t, "ttl")),
			ShownAt: jsonxtest.MaybeZero(at).Draw(t, "shown_at"), NoticeAt: jsonxtest.MaybeZero(at).Draw(t, "notice_at"),
			RemindedAt: jsonxtest.MaybeZero(at).Draw(t, "reminded_at"), Link: maybe(str).Draw(t, "link"),
			Copies: copies.Draw(t, "copies"),
		}
		want, wantErr := json.Marshal(&a)
		got, err := approvals.Encode(&a)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("Encode: %v, json.Marshal: %v", err, wantErr)
		}
		if string(got) != string(want) {
			t.Fatalf("Encode wrote\n%s\njson.Marshal\n%s", got, want)
		}
	})
}
