// Package jsonx appends JSON values by hand, byte for byte as encoding/json
// encodes them, and zero-padded numbers as fmt formats them: the store's hot
// records (outbox effects, audit records) and their ordered keys are written
// with it, without json.Marshal's reflection (and its validation of what is
// JSON already) or fmt's. Fields reads such records back (the requests'
// and approvals'), without reflection, wherever they have that form.
package jsonx

import (
	"encoding/json"
	"strconv"
	"time"
)

// AppendString appends s as json.Marshal quotes it (HTML characters
// escaped, invalid UTF-8 replaced).
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // escapes, non-ASCII: rare in keys, names and errors
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// AppendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds; a year outside 0–9999, which MarshalJSON refuses, is written
// as AppendFormat writes it).
func AppendTime(b []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
}

// AppendPadded appends n in decimal, zero-padded to width characters (the
// sign included), as fmt's %0*d does: the store's ordered keys.
func AppendPadded(b []byte, n int64, width int) []byte {
	if n < 0 {
		return appendDigits(append(b, '-'), strconv.AppendUint(nil, uint64(-n), 10), width-1)
	}
	return AppendPaddedUint(b, uint64(n), width)
}

// AppendPaddedUint is AppendPadded for an unsigned n.
func AppendPaddedUint(b []byte, n uint64, width int) []byte {
	var d [20]byte
	return appendDigits(b, strconv.AppendUint(d[:0], n, 10), width)
}

func appendDigits(b, digits []byte, width int) []byte {
	for i := len(digits); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, digits...)
}
