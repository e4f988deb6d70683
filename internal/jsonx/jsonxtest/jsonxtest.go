// Package jsonxtest generates the values that test a hand-written JSON
// codec against encoding/json: strings with every character encoding/json
// escapes or replaces, and times in any zone and year, some of which
// time.Time's MarshalJSON refuses.
package jsonxtest

import (
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
