package requests_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/requests"
)

// Fuzz targets of request IDs as people type them: ParseID, ParseRef (full
// and short R-07 forms) and UnmarshalText on one string, and FindRefs on the
// text of an ask. Seeds: testdata/fuzz/<target>/, from the cases of
// id_test.go.

// fuzzToday maps a fuzzed number of days to a day the bridge can run on
// (years 1970 to 9999: the ID format has four digits of year).
func fuzzToday(days int64) time.Time {
	const span = 2932896 // days from 1970-01-01 to 9999-12-31
	days %= span
	if days < 0 {
		days += span
	}
	return time.Unix(0, 0).UTC().AddDate(0, 0, int(days)).Add(13 * time.Hour)
}

// FuzzParseID: a string that parses names one ID and is its canonical form
// (or, for ParseRef, the short form R-nn of that ID on today's day); anything
// else is ErrBadID.
func FuzzParseID(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string, days int64) {
		today := fuzzToday(days)
		id, err := requests.ParseID(s)
		switch {
		case err != nil:
			if !errors.Is(err, requests.ErrBadID) || !id.IsZero() {
				t.Fatalf("ParseID(%q) = %v, %v; want the zero ID and ErrBadID", s, id, err)
			}
		case id.IsZero() || id.String() != s:
			t.Fatalf("ParseID(%q) = %v: does not round-trip", s, id)
		default:
			again, err := requests.ParseID(id.String())
			if err != nil || again != id || id.Seq() < 1 || id.Compare(again) != 0 {
				t.Fatalf("ParseID(%q) = %v, again %v, %v", s, id, again, err)
			}
			if k := id.Key(); len(k) != len("20261129-0000000007") {
				t.Fatalf("key %q of %v is not fixed-width", k, id)
			}
		}

		ref, rerr := requests.ParseRef(s, today)
		switch {
		case err == nil:
			if rerr != nil || ref != id {
				t.Fatalf("ParseRef(%q) = %v, %v; ParseID gave %v", s, ref, rerr, id)
			}
		case rerr != nil:
			if !errors.Is(rerr, requests.ErrBadID) || !ref.IsZero() {
				t.Fatalf("ParseRef(%q) = %v, %v; want the zero ID and ErrBadID", s, ref, rerr)
			}
		default: // the short form
			if ref.Short() != s || !ref.Day().Equal(today.Truncate(24*time.Hour)) {
				t.Fatalf("ParseRef(%q, %s) = %v (short %s, day %s)", s, today, ref, ref.Short(), ref.Day())
			}
			if full, err := requests.ParseID(ref.String()); err != nil || full != ref {
				t.Fatalf("ParseRef(%q) = %v, whose String parses as %v, %v", s, ref, full, err)
			}
		}

		var u requests.ID
		uerr := u.UnmarshalText([]byte(s))
		if s == "" {
			if uerr != nil || !u.IsZero() {
				t.Fatalf("UnmarshalText(\"\") = %v, %v", u, uerr)
			}
		} else if (uerr == nil) != (err == nil) || u != id {
			t.Fatalf("UnmarshalText(%q) = %v, %v; ParseID gave %v, %v", s, u, uerr, id, err)
		}
		if b, err := id.MarshalText(); err != nil || string(b) != id.String() {
			t.Fatalf("MarshalText(%v) = %q, %v", id, b, err)
		}
	})
}

// FuzzFindRefs: the IDs found in a text are distinct, each is written in it
// (in full, or short for today's), and parses back.
func FuzzFindRefs(f *testing.F) {
	f.Fuzz(func(t *testing.T, text string, days int64) {
		today := fuzzToday(days)
		ids := requests.FindRefs(text, today)
		for i, id := range ids {
			if id.IsZero() || slices.Contains(ids[:i], id) {
				t.Fatalf("FindRefs(%q) = %v: zero or repeated %v", text, ids, id)
			}
			if !strings.Contains(text, id.String()) && !strings.Contains(text, id.Short()) {
				t.Fatalf("FindRefs(%q) = %v: %v is not in the text", text, ids, id)
			}
			if back, err := requests.ParseID(id.String()); err != nil || back != id {
				t.Fatalf("FindRefs(%q) found %v, which parses as %v, %v", text, id, back, err)
			}
		}
		if again := requests.FindRefs(text, today); !slices.Equal(again, ids) {
			t.Fatalf("FindRefs(%q) = %v, then %v", text, ids, again)
		}
	})
}
