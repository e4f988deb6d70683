package store_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/roombridge/roombridge/internal/jsonx/jsonxtest"
	"github.com/roombridge/roombridge/store"
)

// textID is a field type with its own text form, as requests.ID and the
// states are.
type textID struct{ n int }

func (t textID) MarshalText() ([]byte, error) { return []byte{'#', byte('a' + t.n)}, nil }

func (t *textID) UnmarshalText(b []byte) error {
	if len(b) != 2 || b[0] != '#' {
		return &json.UnsupportedValueError{Str: string(b)}
	}
	t.n = int(b[1] - 'a')
	return nil
}

type decodeNested struct {
	Surface string `json:"surface"`
	Ref     string `json:"ref,omitempty"`
}

// decodeRecord has a field of every kind the stored records use.
type decodeRecord struct {
	ID      textID         `json:"id"`
	Parent  textID         `json:"parent,omitzero"`
	Text    string         `json:"text"`
	Note    string         `json:"note,omitempty"`
	Version int64          `json:"version"`
	Count   int            `json:"count,omitempty"`
	Flag    bool           `json:"flag,omitempty"`
	TTL     time.Duration  `json:"ttl"`
	At      time.Time      `json:"at"`
	Ended   time.Time      `json:"ended,omitzero"`
	Refs    []textID       `json:"refs,omitempty"`
	Copies  []decodeNested `json:"copies,omitempty"`
	Usage   decodeNested   `json:"usage,omitzero"`
}

// TestDecodeIsUnmarshal: Decode reads every record encoding/json writes,
// and bytes near them (mangle), exactly as json.Unmarshal does: the same
// value or an error from both.
func TestDecodeIsUnmarshal(t *testing.T) {
	str := jsonxtest.String()
	id := rapid.Custom(func(t *rapid.T) textID { return textID{rapid.IntRange(0, 25).Draw(t, "n")} })
	at := jsonxtest.Time()
	nested := rapid.Custom(func(t *rapid.T) decodeNested {
		return decodeNested{str.Draw(t, "surface"), str.Draw(t, "ref")}
	})
	rapid.Check(t, func(t *rapid.T) {
		in := decodeRecord{
			ID: id.Draw(t, "id"), Text: str.Draw(t, "text"), Note: str.Draw(t, "note"),
			Version: rapid.Int64().Draw(t, "version"), Count: rapid.Int().Draw(t, "count"), Flag: rapid.Bool().Draw(t, "flag"),
			TTL: time.Duration(rapid.Int64().Draw(t, "ttl")), At: at.Draw(t, "at"),
			Refs: rapid.SliceOfN(id, 0, 3).Draw(t, "refs"), Copies: rapid.SliceOfN(nested, 0, 3).Draw(t, "copies"),
		}
		if rapid.Bool().Draw(t, "full") {
			in.Parent, in.Ended, in.Usage = id.Draw(t, "parent"), at.Draw(t, "ended"), nested.Draw(t, "usage")
		}
		b, err := json.Marshal(in)
		if err != nil {
			t.Skip("a time json.Marshal refuses")
		}
		if rapid.Bool().Draw(t, "mangle") { // and bytes that are not quite a record
			b = mangle(t, b)
		}
		var want, got decodeRecord
		wantErr, gotErr := json.Unmarshal(b, &want), store.Decode(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: json.Unmarshal: %v, Decode: %v", b, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Decode gave\n%+v\nwant\n%+v", b, got, want)
		}
	})
}

// mangle changes b in one of the ways a damaged or foreign record differs:
// cut, a byte replaced, trailing data, another name's case, a repeated
// name, nulls, whitespace, an escape, a number in another form.
func mangle(t *rapid.T, b []byte) []byte {
	i := rapid.IntRange(0, len(b)-1).Draw(t, "at")
	switch rapid.IntRange(0, 8).Draw(t, "how") {
	case 0:
		return b[:i]
	case 1:
		out := append([]byte(nil), b...)
		out[i] = rapid.SampledFrom([]byte(`{}[]":,0x \-e.`)).Draw(t, "byte")
		return out
	case 2:
		return append(append([]byte(nil), b...), rapid.SampledFrom([]string{" ", "{}", "x", "\n"}).Draw(t, "tail")...)
	case 3:
		return append([]byte(`{"TEXT":"upper","Version":7,"ID":"#c",`), b[1:]...)
	case 4:
		return append([]byte(`{"text":"first","version":1,"refs":["#a"],"copies":[],`), b[1:]...)
	case 5:
		return append([]byte(`{"text":null,"refs":null,"at":null,"parent":null,`), b[1:]...)
	case 6:
		return append([]byte("\t{ "), b[1:]...)
	case 7:
		return append([]byte(`{"text":"\u0041\n","unknown":[1,{"a":"]"}],"note":"\ud800",`), b[1:]...)
	default:
		return append([]byte(`{"version":1.0,"ttl":1e3,"count":-0,`), b[1:]...)
	}
}
