package requests

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/roombridge/roombridge/internal/jsonx"
)

// ID is a request's public ID: R + the UTC day (yyyymmdd) + "-" + a per-owner
// daily counter of at least two digits, e.g. R20261129-07 or R20261129-123.
// The zero ID is invalid.
type ID struct {
	day int // yyyymmdd
	n   int
}

// ErrBadID: the text is not a request ID.
var ErrBadID = errors.New("malformed request ID")

// NewID returns the n-th ID of the UTC day of t.
func NewID(t time.Time, n int) ID {
	y, m, d := t.UTC().Date()
	return ID{day: y*10000 + int(m)*100 + d, n: n}
}

// String formats the ID canonically.
func (id ID) String() string {
	if id.IsZero() {
		return ""
	}
	b := make([]byte, 0, 16)
	b = jsonx.AppendPadded(append(b, 'R'), int64(id.day), 8)
	return string(jsonx.AppendPadded(append(b, '-'), int64(id.n), 2))
}

// Short is the in-room short form, R-07.
func (id ID) Short() string { return fmt.Sprintf("R-%02d", id.n) }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id.day == 0 }

// Day returns the UTC day the ID was issued on, at midnight.
func (id ID) Day() time.Time {
	return time.Date(id.day/10000, time.Month(id.day/100%100), id.day%100, 0, 0, 0, 0, time.UTC)
}

// Seq returns the ID's daily counter.
func (id ID) Seq() int { return id.n }

// Compare orders IDs by day, then counter (R…-100 after R…-99).
func (id ID) Compare(o ID) int {
	switch {
	case id.day != o.day:
		return cmpInt(id.day, o.day)
	default:
		return cmpInt(id.n, o.n)
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Key is a fixed-width form whose byte order is the ID order, for store keys.
func (id ID) Key() string {
	var buf [19]byte
	return string(id.appendKey(buf[:0]))
}

// appendKey appends id's Key to b.
func (id ID) appendKey(b []byte) []byte {
	return jsonx.AppendPadded(append(jsonx.AppendPadded(b, int64(id.day), 8), '-'), int64(id.n), 10)
}

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler ("" gives the zero ID).
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = ID{}
		return nil
	}
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

var (
	shortRE = regexp.MustCompile(`^R-([0-9]{2,9})$`)
	// mentionRE finds IDs, full or short, inside free text.
	mentionRE = regexp.MustCompile(`\bR(?:[0-9]{8})?-[0-9]{2,9}\b`)
)

// ParseID parses the full canonical form (R20261129-07): R, eight digits
// (a day), a dash, two to nine digits (the counter, without extra leading
// zeros). It reads them by hand: every stored record's IDs go through it.
func ParseID(s string) (ID, error) {
	if len(s) < 12 || len(s) > 19 || s[0] != 'R' || s[9] != '-' || !allDigits(s[1:9]) || !allDigits(s[10:]) {
		return ID{}, fmt.Errorf("%w: %q (want R<yyyymmdd>-<nn>, e.g. R20261129-07)", ErrBadID, s)
	}
	day, _ := strconv.Atoi(s[1:9])
	if _, err := time.Parse("20060102", s[1:9]); err != nil {
		return ID{}, fmt.Errorf("%w: %q: no such day", ErrBadID, s)
	}
	return counter(s, day, s[10:])
}

// allDigits tells whether s is all ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParseRef parses the full form or the short form R-07, which means that
// counter on the UTC day of today.
func ParseRef(s string, today time.Time) (ID, error) {
	if m := shortRE.FindStringSubmatch(s); m != nil {
		return counter(s, NewID(today, 1).day, m[1])
	}
	return ParseID(s)
}

func counter(s string, day int, digits string) (ID, error) {
	n, _ := strconv.Atoi(digits)
	id := ID{day: day, n: n}
	if n == 0 || (len(digits) > 2 && digits[0] == '0') { // as %02d writes it: no extra leading zeros
		return ID{}, fmt.Errorf("%w: %q (counter must be 01 or more, without extra leading zeros)", ErrBadID, s)
	}
	return id, nil
}

// FindRefs returns the request IDs mentioned in text (full or short form,
// short ones taken relative to today), without duplicates, in order.
func FindRefs(text string, today time.Time) []ID {
	var out []ID
	seen := map[ID]bool{}
	for _, m := range mentionRE.FindAllString(text, -1) {
		id, err := ParseRef(m, today)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	return out
}
