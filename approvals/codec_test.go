package approvals_test

import (
	"fmt"
	"net/url"
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
	str, at := jsonxtest.Text(full), jsonxtest.Instant(full)
	opt, optAt := jsonxtest.Optional(str, full), jsonxtest.Optional(at, full)
	id := jsonxtest.Optional(rapid.Custom(func(t *rapid.T) requests.ID {
		day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rapid.IntRange(0, 36524).Draw(t, "day"))
		return requests.NewID(day, rapid.IntRange(1, 999_999_999).Draw(t, "n"))
	}), full)
	cp := rapid.Custom(func(t *rapid.T) approvals.Copy {
		return approvals.Copy{Surface: str.Draw(t, "surface"), Request: str.Draw(t, "request"), Ref: str.Draw(t, "ref")}
	})
	return rapid.Custom(func(t *rapid.T) approvals.Approval {
		return approvals.Approval{
			ID: str.Draw(t, "id"), Kind: approvals.Kind(str.Draw(t, "kind")), RequestID: id.Draw(t, "request_id"),
			Root: id.Draw(t, "root"), RootRoom: opt.Draw(t, "root_room"),
			Room: str.Draw(t, "room"), Agent: str.Draw(t, "agent"), Requester: str.Draw(t, "requester"),
			Action: str.Draw(t, "action"), Asker: str.Draw(t, "asker"), State: approvals.State(str.Draw(t, "state")),
			Version:   jsonxtest.Int64(full).Draw(t, "version"),
			DecidedBy: opt.Draw(t, "decided_by"), Surface: opt.Draw(t, "surface"), DecidedAt: optAt.Draw(t, "decided_at"),
			Answer: opt.Draw(t, "answer"), Reason: opt.Draw(t, "reason"),
			Created: at.Draw(t, "created"), ExpiresAt: at.Draw(t, "expires_at"), TTL: time.Duration(jsonxtest.Int64(full).Draw(t, "ttl")),
			ShownAt: optAt.Draw(t, "shown_at"), NoticeAt: optAt.Draw(t, "notice_at"),
			RemindedAt: optAt.Draw(t, "reminded_at"), Link: opt.Draw(t, "link"),
			Copies: rapid.SliceOfN(cp, jsonxtest.Several(full), 3).Draw(t, "copies"),
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

// TestInboxKeyIsWhatFmtWrote: the inbox index's keys are the ones
// fmt.Sprintf wrote before, so an index written then still sorts and
// deletes the same.
func TestInboxKeyIsWhatFmtWrote(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		room, key := jsonxtest.String().Draw(t, "room"), jsonxtest.String().Draw(t, "key")
		ms := rapid.OneOf(rapid.Int64Range(-1e14, 1e14), rapid.Int64()).Draw(t, "ms")
		a := &approvals.Approval{Created: time.UnixMilli(ms)}
		if got, want := approvals.InboxKey(room, a, key), fmt.Sprintf("%s/%013d/%s", url.PathEscape(room), a.Created.UnixMilli(), key); got != want {
			t.Fatalf("inboxKey = %q, want %q", got, want)
		}
	})
}

// TestDecodeRecordIsUnmarshal: every record encode writes is decoded
// without reflection (DecodeRecord, store.Decode's fast path) into the
// value json.Unmarshal gives.
func TestDecodeRecordIsUnmarshal(t *testing.T) {
	jsonxtest.DecodesAsUnmarshal(t, genApproval(false), approvals.Encode, (*approvals.Approval).DecodeRecord)
}

// FuzzDecodeRecord: whatever DecodeRecord decodes, json.Unmarshal decodes
// into the same value; what it does not decode, it leaves zero (for
// store.Decode to decode with the general decoder).
func FuzzDecodeRecord(f *testing.F) {
	var seeds [][]byte
	for seed := range 8 {
		a := genApproval(seed%2 == 0).Example(seed)
		if b, err := approvals.Encode(&a); err == nil {
			seeds = append(seeds, b)
		}
	}
	jsonxtest.FuzzDecoder(f, seeds, (*approvals.Approval).DecodeRecord)
}

// BenchmarkDecode decodes an expiring approval's record (two card copies)
// by its own reader (store.Decode's fast path) and by the general decoder
// (a type without DecodeRecord: store.Decode's path for every other form).
func BenchmarkDecode(b *testing.B) {
	at := time.Date(2026, 11, 29, 3, 0, 0, 123456789, time.UTC)
	a := approvals.Approval{ID: "20261129-0000000001/0000", Kind: approvals.KindRequest, RequestID: requests.NewID(at, 1),
		Room: "backend", Agent: "coder", Requester: "slack:U123", Action: "please deploy build 42", State: approvals.Pending,
		Version: 1, Created: at, ExpiresAt: at.Add(24 * time.Hour), TTL: 24 * time.Hour, NoticeAt: at.Add(23 * time.Hour),
		Copies: []approvals.Copy{{Surface: "slack", Request: "R20261129-01", Ref: "approval/20261129-0000000001/0000/thread"},
			{Surface: "slack", Request: "R20261129-01", Ref: "approval/20261129-0000000001/0000/dm/slack:UAPPROVER"}}}
	rec, err := approvals.Encode(&a)
	if err != nil {
		b.Fatal(err)
	}
	type general approvals.Approval // no DecodeRecord
	for _, c := range []struct {
		name   string
		decode func() error
	}{
		{"record", func() error { var v approvals.Approval; return store.Decode(rec, &v) }},
		{"general", func() error { var v general; return store.Decode(rec, &v) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.decode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
