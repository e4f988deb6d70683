// Package jsonxtest tests a hand-written JSON codec against encoding/json:
// generators of the values that test it (strings with every character
// encoding/json escapes or replaces, times in any zone and year, records
// with every field set) and the checks (EncodesAsMarshal: the bytes
// json.Marshal writes; KeepsEveryField: no field lost; DecodesAsUnmarshal
// and FuzzDecoder: the value json.Unmarshal reads).
package jsonxtest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// String generates strings: any UTF-8, the characters encoding/json
// escapes (quotes, backslashes, controls, HTML's <, >, &, U+2028 and
// U+2029), and arbitrary bytes (invalid UTF-8, which it replaces).
func String() *rapid.Generator[string] {
	return rapid.OneOf(rapid.String(),
		rapid.StringMatching(`[a-z0-9 <>&"\\/\x00-\x1f\x7f\x{2028}\x{2029}\x{fffd}é]{0,12}`),
		rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "bytes")) }))
}

// Time generates times: mostly UTC, some in another zone (whole hours
// or not), some with a year past 9999 or before 0.
func Time() *rapid.Generator[time.Time] {
	return rapid.Custom(func(t *rapid.T) time.Time {
		s := rapid.OneOf(rapid.Int64Range(-1e10, 1e11), rapid.Int64Range(-1e12, 1e12)).Draw(t, "s")
		tm := time.Unix(s, rapid.Int64Range(0, 999_999_999).Draw(t, "ns")).UTC()
		if rapid.IntRange(0, 4).Draw(t, "zoned") == 0 {
			tm = tm.In(time.FixedZone("z", rapid.IntRange(-100_000, 100_000).Draw(t, "offset")))
		}
		return tm
	})
}

// Text generates a record's strings: any (String), or (full) plain
// non-empty ones, which every decoder reads back as written.
func Text(full bool) *rapid.Generator[string] {
	if full {
		return rapid.StringMatching(`[a-zA-Z0-9 ./:é-]{1,8}`)
	}
	return String()
}

// Instant generates a record's times: any (Time), or (full) times in UTC,
// as the records' are (an offset's seconds do not survive RFC 3339).
func Instant(full bool) *rapid.Generator[time.Time] {
	if full {
		return rapid.Map(Time(), time.Time.UTC)
	}
	return Time()
}

// Optional is g's value or sometimes the zero value; (full) always g's,
// which must not be zero.
func Optional[T any](g *rapid.Generator[T], full bool) *rapid.Generator[T] {
	if full {
		return g
	}
	return MaybeZero(g)
}

// Int64 generates a record's numbers: any, or (full) any but 0.
func Int64(full bool) *rapid.Generator[int64] {
	if full {
		return rapid.Int64().Filter(func(n int64) bool { return n != 0 })
	}
	return rapid.Int64()
}

// Several is how many elements a record's list has at least: 0, or
// (full) 1.
func Several(full bool) int {
	if full {
		return 1
	}
	return 0
}

// MaybeZero is g's value or, one time in three, the zero value.
func MaybeZero[T any](g *rapid.Generator[T]) *rapid.Generator[T] {
	return rapid.Custom(func(t *rapid.T) T {
		var zero T
		if rapid.IntRange(0, 2).Draw(t, "zero") == 0 {
			return zero
		}
		return g.Draw(t, "value")
	})
}

// EncodesAsMarshal checks, for every value gen draws, that encode writes
// what json.Marshal writes, byte for byte, and fails where it fails.
func EncodesAsMarshal[T any](t *testing.T, gen *rapid.Generator[T], encode func(*T) ([]byte, error)) {
	rapid.Check(t, func(t *rapid.T) {
		v := gen.Draw(t, "value")
		want, wantErr := json.Marshal(&v)
		got, err := encode(&v)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("encode: %v, json.Marshal: %v", err, wantErr)
		}
		if string(got) != string(want) {
			t.Fatalf("encode wrote\n%s\njson.Marshal\n%s", got, want)
		}
	})
}

// KeepsEveryField checks, for every value gen draws with all its fields
// set (AllSet), that decode reads back what encode wrote (SameRecord): a
// field added to T but not to encode fails here.
func KeepsEveryField[T any](t *testing.T, gen *rapid.Generator[T], encode func(*T) ([]byte, error), decode func([]byte, any) error) {
	rapid.Check(t, func(t *rapid.T) {
		v := gen.Draw(t, "value")
		AllSet(t, v)
		b, err := encode(&v)
		if err != nil {
			t.Skip("a time json.Marshal refuses")
		}
		var back T
		if err := decode(b, &back); err != nil || !SameRecord(back, v) {
			t.Fatalf("%s: decoded %+v (%v), want %+v", b, back, err, v)
		}
	})
}

// DecodesAsUnmarshal checks, for every value gen draws, that decode reads
// the record encode wrote, identically to json.Unmarshal (Identical), and
// fails where json.Unmarshal fails (a state no longer known), leaving its
// value zero.
func DecodesAsUnmarshal[T any](t *testing.T, gen *rapid.Generator[T], encode func(*T) ([]byte, error), decode func(*T, []byte) bool) {
	rapid.Check(t, func(t *rapid.T) {
		v := gen.Draw(t, "value")
		b, err := encode(&v)
		if err != nil {
			t.Skip("a time json.Marshal refuses")
		}
		var got, want T
		ok, wantErr := decode(&got, b), json.Unmarshal(b, &want)
		switch {
		case wantErr != nil && (ok || !reflect.ValueOf(got).IsZero()):
			t.Fatalf("%s: decoded %+v (%v), json.Unmarshal fails: %v", b, got, ok, wantErr)
		case wantErr == nil && !ok:
			t.Fatalf("%s: not decoded", b)
		case wantErr == nil && !Identical(got, want):
			t.Fatalf("%s: decoded %+v, json.Unmarshal %+v", b, got, want)
		}
	})
}

// FuzzDecoder fuzzes decode from seeds (records as encode wrote them): for
// any input it decodes, json.Unmarshal succeeds and gives the identical
// value; where it does not, its value is left zero.
func FuzzDecoder[T any](f *testing.F, seeds [][]byte, decode func(*T, []byte) bool) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want T
		if !decode(&got, b) {
			if !reflect.ValueOf(got).IsZero() {
				t.Fatalf("%q: not decoded, but left %+v", b, got)
			}
			return
		}
		if err := json.Unmarshal(b, &want); err != nil || !Identical(got, want) {
			t.Fatalf("%q: decoded %+v, json.Unmarshal %+v (%v)", b, got, want, err)
		}
	})
}

// AllSet fails t unless every field of the struct v is set (not its zero
// value), and of each struct in it or in its slices (those whose fields
// are all exported; a time or a requests.ID is a value).
func AllSet(t *rapid.T, v any) {
	allSet(t, reflect.ValueOf(v), reflect.TypeOf(v).Name())
}

func allSet(t *rapid.T, v reflect.Value, path string) {
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), path+"."+v.Type().Field(i).Name
		if f.IsZero() {
			t.Fatalf("%s is not set: set every field (and encode and decode it)", name)
		}
		switch {
		case f.Kind() == reflect.Struct && f.Type() != timeType && exported(f.Type()):
			allSet(t, f, name)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			for j := 0; j < f.Len(); j++ {
				allSet(t, f.Index(j), name)
			}
		}
	}
}

// SameRecord tells whether a record decoded from JSON is the one encoded:
// equal field by field, times as instants (a decoded time's zone is a
// fixed offset, not the original location).
func SameRecord(got, want any) bool {
	return sameValue(reflect.ValueOf(got), reflect.ValueOf(want), false)
}

// Identical tells whether two values decoded from JSON are the same: equal
// field by field, times as instants in the same zone offset and name, a
// nil slice only where the other's is nil.
func Identical(a, b any) bool {
	return sameValue(reflect.ValueOf(a), reflect.ValueOf(b), true)
}

var timeType = reflect.TypeOf(time.Time{})

// sameValue compares a and b (strict: Identical, else SameRecord).
func sameValue(a, b reflect.Value, strict bool) bool {
	switch {
	case a.Type() == timeType:
		ta, tb := a.Interface().(time.Time), b.Interface().(time.Time)
		if strict {
			na, oa := ta.Zone()
			nb, ob := tb.Zone()
			if na != nb || oa != ob {
				return false
			}
		}
		return ta.Equal(tb)
	case a.Kind() == reflect.Struct && exported(a.Type()):
		for i := 0; i < a.NumField(); i++ {
			if !sameValue(a.Field(i), b.Field(i), strict) {
				return false
			}
		}
		return true
	case a.Kind() == reflect.Slice:
		if a.Len() != b.Len() || (strict && a.IsNil() != b.IsNil()) {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !sameValue(a.Index(i), b.Index(i), strict) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// exported tells whether every field of struct type t is exported (one
// that is not, as requests.ID, is compared whole).
func exported(t reflect.Type) bool {
	for i := 0; i < t.NumField(); i++ {
		if !t.Field(i).IsExported() {
			return false
		}
	}
	return true
}
