package jsonx

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Fields reads back, without reflection, a record Object wrote: the
// store's hot records are decoded with it in a fraction of the general
// decoder's time (a sweep decodes an approval and a request for each
// expiry). It reads Object's form alone: no whitespace, no null, numbers
// as integers, names without escapes; anything else (and anything the
// record's reader does not expect: Fail) makes Ok false, and the caller
// decodes the record with the general decoder instead, which gives the
// same value for every record Fields reads (store.Decode; the records'
// tests hold the two to that). The strings it returns share one copy of
// the record.
type Fields struct {
	s   string
	i   int
	bad bool
}

// ReadFields starts reading record b.
func ReadFields(b []byte) Fields { return Fields{s: string(b)} }

// Ok tells whether the whole record was read, as the general decoder
// would read it.
func (f *Fields) Ok() bool { return !f.bad && f.i == len(f.s) }

// Fail gives up the record (a name or a value its reader does not
// expect).
func (f *Fields) Fail() { f.bad = true }

// next consumes c, failing if it is not next.
func (f *Fields) next(c byte) bool {
	if f.bad || f.i >= len(f.s) || f.s[f.i] != c {
		f.bad = true
		return false
	}
	f.i++
	return true
}

// at consumes c if it is next.
func (f *Fields) at(c byte) bool {
	if !f.bad && f.i < len(f.s) && f.s[f.i] == c {
		f.i++
		return true
	}
	return false
}

// Object reads an object, calling field with each name in turn (valid
// during the call); field reads the value, with exactly one call of a
// reading method (or Fail).
func (f *Fields) Object(field func(name string)) {
	if !f.next('{') || f.at('}') {
		return
	}
	for !f.bad {
		name, escaped := f.quoted()
		if escaped {
			f.bad = true
		}
		if !f.next(':') {
			return
		}
		field(name)
		if !f.at(',') {
			f.next('}')
			return
		}
	}
}

// Array reads an array, calling elem for each element, which reads it
// with one call of a reading method.
func (f *Fields) Array(elem func()) {
	if !f.next('[') || f.at(']') {
		return
	}
	for !f.bad {
		elem()
		if !f.at(',') {
			f.next(']')
			return
		}
	}
}

// quoted reads a string's quoted bytes, as they are, and tells whether
// they hold an escape; a control character (invalid in JSON) or no
// closing quote fails.
func (f *Fields) quoted() (raw string, escaped bool) {
	if !f.next('"') {
		return "", false
	}
	for j := f.i; j < len(f.s); j++ {
		switch c := f.s[j]; {
		case c == '"':
			raw, f.i = f.s[f.i:j], j+1
			return raw, escaped
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			f.bad = true
			return "", false
		}
	}
	f.bad = true
	return "", false
}

// String reads a string. Invalid UTF-8 (which the general decoder
// replaces) fails.
func (f *Fields) String() string {
	start := f.i
	raw, escaped := f.quoted()
	switch {
	case f.bad:
		return ""
	case !escaped:
		if !utf8.ValidString(raw) {
			f.bad = true
			return ""
		}
		return raw
	}
	b, err := jsontext.AppendUnquote(nil, f.s[start:f.i])
	if err != nil {
		f.bad = true
		return ""
	}
	return string(b)
}

// Time reads a time as time.Time's UnmarshalJSON does (the quoted bytes as
// they are, in RFC 3339).
func (f *Fields) Time() time.Time {
	raw, escaped := f.quoted()
	var t time.Time
	var buf [40]byte
	if escaped || f.bad || len(raw) > len(buf) || t.UnmarshalText(append(buf[:0], raw...)) != nil {
		f.bad = true
		return time.Time{}
	}
	return t
}

// Int reads an integer: JSON's form of one, in int64's range (a fraction
// or an exponent fails).
func (f *Fields) Int() int64 {
	j := f.i
	if j < len(f.s) && f.s[j] == '-' {
		j++
	}
	d := j
	for j < len(f.s) && f.s[j] >= '0' && f.s[j] <= '9' {
		j++
	}
	switch {
	case f.bad || j == d || (f.s[d] == '0' && j > d+1):
		f.bad = true
		return 0
	case j < len(f.s) && (f.s[j] == '.' || f.s[j] == 'e' || f.s[j] == 'E'):
		f.bad = true
		return 0
	}
	n, err := strconv.ParseInt(f.s[f.i:j], 10, 64)
	if err != nil {
		f.bad = true
		return 0
	}
	f.i = j
	return n
}

// Bool reads true or false.
func (f *Fields) Bool() bool {
	switch {
	case f.bad:
	case len(f.s)-f.i >= 4 && f.s[f.i:f.i+4] == "true":
		f.i += 4
		return true
	case len(f.s)-f.i >= 5 && f.s[f.i:f.i+5] == "false":
		f.i += 5
		return false
	}
	f.bad = true
	return false
}
