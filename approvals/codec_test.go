package approvals_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/approvals"
	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/requests"
	"github.com/roombridge/roombridge/store"
)

// genApproval generates approvals with any value in every field (all of
// them set when full).
func genApproval(full bool) *rapid.Generator[approvals.Approval] {
	str, at := jsonxtest.String(), jsonxtest.Time()
	maybe, maybeAt := jsonxtest.MaybeZero[string], jsonxtest.MaybeZero[time.Time]
	if full { // every field set; times in UTC, as the records' are (an offset's seconds do not survive RFC 3339)
		at = rapid.Map(at, time.Time.UTC)
		maybe = func(*rapid.Generator[string]) *rapid.Generator[string] {
			return rapid.StringMatching(`[a-zA-Z0-9 ./:é-]{1,8}`)
		}
		maybeAt = func(*rapid.Generator[time.Time]) *rapid.Generator[time.Time] { return at }
	}
	id := rapid.Custom(func(t *rapid.T) requests.ID {
		day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rapid.IntRange(0, 36524).Draw(t, "day"))
		return requests.NewID(day, rapid.IntRange(1, 999_999_999).Draw(t, "n"))
	})
	maybeID := jsonxtest.MaybeZero(id)
	if full {
		maybeID = id
	}
	cp := rapid.Custom(func(t *rapid.T) approvals.Copy {
		return approvals.Copy{Surface: maybe(str).Draw(t, "surface"), Request: maybe(str).Draw(t, "request"), Ref: maybe(str).Draw(t, "ref")}
	})
	return rapid.Custom(func(t *rapid.T) approvals.Approval {
		return approvals.Approval{
			ID: maybe(str).Draw(t, "id"), Kind: approvals.Kind(maybe(str).Draw(t, "kind")), RequestID: maybeID.Draw(t, "request_id"),
			Root: maybeID.Draw(t, "root"), RootRoom: maybe(str).Draw(t, "root_room"),
			Room: maybe(str).Draw(t, "room"), Agent: maybe(str).Draw(t, "agent"), Requester: maybe(str).Draw(t, "requester"),
			Action: maybe(str).Draw(t, "action"), Asker: maybe(str).Draw(t, "asker"), State: approvals.State(maybe(str).Draw(t, "state")),
			Version:   rapid.Int64Range(1, 1<<62).Draw(t, "version") * int64(rapid.SampledFrom([]int{-1, 1}).Draw(t, "sign")),
			DecidedBy: maybe(str).Draw(t, "decided_by"), Surface: maybe(str).Draw(t, "surface"), DecidedAt: maybeAt(at).Draw(t, "decided_at"),
			Answer: maybe(str).Draw(t, "answer"), Reason: maybe(str).Draw(t, "reason"),
			Created: at.Draw(t, "created"), ExpiresAt: at.Draw(t, "expires_at"), TTL: time.Duration(rapid.Int64().Draw(t, "ttl")) | 1,
			ShownAt: maybeAt(at).Draw(t, "shown_at"), NoticeAt: maybeAt(at).Draw(t, "notice_at"),
			RemindedAt: maybeAt(at).Draw(t, "reminded_at"), Link: maybe(str).Draw(t, "link"),
			Copies: rapid.SliceOfN(cp, map[bool]int{true: 1, false: 0}[full], 3).Draw(t, "copies"),
		}
	})
}

// TestEncodeIsMarshal: an approval's record is what json.Marshal writes,
// byte for byte, for any approval (and an error where json.Marshal
// refuses one: a time out of its range).
func TestEncodeIsMarshal(t *testing.T) {
	jsonxtest.EncodesAsMarshal(t, genApproval(false), approvals.Encode)
}

// TestCodecCoversEveryField: with every field of an approval (and of its
// copies) set, the record holds each of them: a field added to the type
// but not to encode fails here (and a field the generator leaves out
// fails first).
func TestCodecCoversEveryField(t *testing.T) {
	jsonxtest.KeepsEveryField(t, genApproval(true), approvals.Encode, store.Decode)
}
