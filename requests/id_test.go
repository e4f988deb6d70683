package requests_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roombridge/roombridge/requests"
	"pgregory.net/rapid"
)

func TestIDStringAndParse(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{1, "R20261129-01"},
		{7, "R20261129-07"},
		{99, "R20261129-99"},
		{100, "R20261129-100"},
		{123, "R20261129-123"},
		{999999999, "R20261129-999999999"},
	} {
		id := requests.NewID(day0, tc.n)
		if got := id.String(); got != tc.want {
			t.Errorf("NewID(day0, %d) = %s, want %s", tc.n, got, tc.want)
		}
		back, err := requests.ParseID(tc.want)
		if err != nil || back != id {
			t.Errorf("ParseID(%s) = %v, %v; want %v", tc.want, back, err, id)
		}
		// The full form parses the same whatever today is.
		ref, err := requests.ParseRef(tc.want, day0.AddDate(0, 3, 0))
		if err != nil || ref != id {
			t.Errorf("ParseRef(%s) = %v, %v; want %v", tc.want, ref, err, id)
		}
		if id.Seq() != tc.n || !id.Day().Equal(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("%s: Seq %d Day %v", id, id.Seq(), id.Day())
		}
	}
	if got := requests.NewID(day0, 7).Short(); got != "R-07" {
		t.Errorf("Short = %q, want R-07", got)
	}
	if got := requests.NewID(day0, 123).Short(); got != "R-123" {
		t.Errorf("Short = %q, want R-123", got)
	}
	var zero requests.ID
	if !zero.IsZero() || zero.String() != "" || requests.NewID(day0, 1).IsZero() {
		t.Error("zero ID: IsZero/String wrong")
	}
}

func TestIDDayIsUTC(t *testing.T) {
	// 2026-11-30 05:00 in UTC+8 is still 2026-11-29 in UTC.
	east := time.FixedZone("UTC+8", 8*3600)
	local := time.Date(2026, 11, 30, 5, 0, 0, 0, east)
	if got := requests.NewID(local, 3).String(); got != "R20261129-03" {
		t.Errorf("NewID in UTC+8 = %s, want R20261129-03", got)
	}
	if got, err := requests.ParseRef("R-03", local); err != nil || got.String() != "R20261129-03" {
		t.Errorf("ParseRef(R-03, UTC+8 morning) = %v, %v", got, err)
	}
}

func TestParseRefShort(t *testing.T) {
	for _, tc := range []struct {
		in    string
		today time.Time
		want  string
	}{
		{"R-07", day0, "R20261129-07"},
		{"R-100", day0, "R20261129-100"},
		{"R-07", day0.AddDate(0, 0, 1), "R20261130-07"},
		{"R-01", time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC), "R20261231-01"},
		{"R-01", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "R20270101-01"},
	} {
		got, err := requests.ParseRef(tc.in, tc.today)
		if err != nil || got.String() != tc.want {
			t.Errorf("ParseRef(%q, %s) = %v, %v; want %s", tc.in, tc.today.Format(time.DateOnly), got, err, tc.want)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	bad := []string{
		"R2026112-07",   // seven-digit day
		"R20261129-7",   // one-digit counter
		"R20261129-007", // extra leading zero
		"R20261331-01",  // no month 13
		"R20260230-01",  // no 30 February
		"R20261129-00",  // counter starts at 01
		"X", "", "R", "R-", "R-7", "R-007", "R-00",
		"r20261129-07", "R20261129_07", "R20261129-07 ", " R20261129-07",
		"R20261129-", "R-1234567890", "R20261129-1234567890",
		"R2026-11-29-07", "R20261129-0x1",
	}
	for _, s := range bad {
		if id, err := requests.ParseID(s); !errors.Is(err, requests.ErrBadID) {
			t.Errorf("ParseID(%q) = %v, %v; want ErrBadID", s, id, err)
		}
		if id, err := requests.ParseRef(s, day0); !errors.Is(err, requests.ErrBadID) {
			t.Errorf("ParseRef(%q) = %v, %v; want ErrBadID", s, id, err)
		}
		var id requests.ID
		if s != "" {
			if err := id.UnmarshalText([]byte(s)); !errors.Is(err, requests.ErrBadID) {
				t.Errorf("UnmarshalText(%q) = %v; want ErrBadID", s, err)
			}
		}
	}
	// The short form is only for ParseRef.
	if _, err := requests.ParseID("R-07"); !errors.Is(err, requests.ErrBadID) {
		t.Errorf("ParseID(R-07) = %v; want ErrBadID", err)
	}
	_, err := requests.ParseID("R20261331-01")
	if err == nil || !strings.Contains(err.Error(), "R20261331-01") {
		t.Errorf("error %v should quote the input", err)
	}
}

func TestIDOrder(t *testing.T) {
	d1 := day0
	d2 := day0.AddDate(0, 0, 1)
	y2 := day0.AddDate(1, 0, 0)
	ordered := []requests.ID{
		requests.NewID(d1, 1), requests.NewID(d1, 2), requests.NewID(d1, 9), requests.NewID(d1, 10),
		requests.NewID(d1, 99), requests.NewID(d1, 100), requests.NewID(d1, 101), requests.NewID(d1, 999),
		requests.NewID(d1, 1000), requests.NewID(d1, 999999999),
		requests.NewID(d2, 1), requests.NewID(d2, 100), requests.NewID(y2, 1),
	}
	for i, a := range ordered {
		for j, b := range ordered {
			want := cmp(i, j)
			if got := a.Compare(b); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", a, b, got, want)
			}
			if got := strings.Compare(a.Key(), b.Key()); got != want {
				t.Errorf("Key order %s (%s) vs %s (%s) = %d, want %d", a, a.Key(), b, b.Key(), got, want)
			}
		}
	}
	// The canonical strings do not sort by ID (R…-100 < R…-99 as text):
	// that is why store keys use Key().
	if requests.NewID(d1, 100).String() > requests.NewID(d1, 99).String() {
		t.Error("unexpected: canonical strings sort numerically")
	}
}

func cmp(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// genID draws a valid ID on a day between 2000 and 2099.
func genID(t *rapid.T, label string) requests.ID {
	base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	day := base.AddDate(0, 0, rapid.IntRange(0, 36524).Draw(t, label+".day"))
	n := rapid.OneOf(rapid.IntRange(1, 120), rapid.IntRange(1, 999999999)).Draw(t, label+".n")
	return requests.NewID(day, n)
}

func TestIDProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genID(t, "a"), genID(t, "b")
		// Round trips.
		for _, id := range []requests.ID{a, b} {
			back, err := requests.ParseID(id.String())
			if err != nil || back != id {
				t.Fatalf("ParseID(%s) = %v, %v", id, back, err)
			}
			ref, err := requests.ParseRef(id.Short(), id.Day().Add(13*time.Hour))
			if err != nil || ref != id {
				t.Fatalf("ParseRef(%s, its day) = %v, %v; want %s", id.Short(), ref, err, id)
			}
			j, err := json.Marshal(id)
			if err != nil || string(j) != `"`+id.String()+`"` {
				t.Fatalf("json.Marshal(%s) = %s, %v", id, j, err)
			}
			var back2 requests.ID
			if err := json.Unmarshal(j, &back2); err != nil || back2 != id {
				t.Fatalf("json round trip of %s = %v, %v", id, back2, err)
			}
		}
		// Key byte order is Compare order, and Compare is antisymmetric.
		c := a.Compare(b)
		if k := strings.Compare(a.Key(), b.Key()); k != c {
			t.Fatalf("%s vs %s: Compare %d, Key order %d", a, b, c, k)
		}
		if b.Compare(a) != -c || (c == 0) != (a == b) {
			t.Fatalf("%s vs %s: Compare not antisymmetric or not equality", a, b)
		}
		// Day first, counter second.
		if a.Day().Before(b.Day()) && c != -1 {
			t.Fatalf("%s is on an earlier day than %s but Compare = %d", a, b, c)
		}
	})
}

func TestIDJSON(t *testing.T) {
	id := requests.NewID(day0, 7)
	b, err := json.Marshal(id)
	if err != nil || string(b) != `"R20261129-07"` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	r := requests.Request{ID: id, State: requests.Pending, References: []requests.ID{requests.NewID(day0, 100)}}
	b, err = json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["id"] != "R20261129-07" || m["state"] != "pending" {
		t.Errorf("request JSON: %s", b)
	}
	if refs, _ := m["references"].([]any); len(refs) != 1 || refs[0] != "R20261129-100" {
		t.Errorf("references in JSON: %s", b)
	}
	for _, k := range []string{"retry_of", "delegated_by", "started_at", "ended_at"} {
		if _, ok := m[k]; ok {
			t.Errorf("zero %s should be omitted: %s", k, b)
		}
	}
	var back requests.Request
	if err := json.Unmarshal(b, &back); err != nil || back.ID != id || !back.RetryOf.IsZero() || back.References[0] != requests.NewID(day0, 100) {
		t.Errorf("request JSON round trip: %+v, %v", back, err)
	}
	var bad requests.ID
	if err := json.Unmarshal([]byte(`"R20261129-007"`), &bad); !errors.Is(err, requests.ErrBadID) {
		t.Errorf("json.Unmarshal of a bad ID = %v; want ErrBadID", err)
	}
}

func TestFindRefs(t *testing.T) {
	text := "Follow up on R20261129-07 (same as R-07), and R-100; see also R20261128-05,\n" +
		"again R20261128-05. Not IDs: XR-07, R-7, R-007, R20261129-007, R20261331-01, foo-R-08x, R-00.\n" +
		"End: R-12"
	got := requests.FindRefs(text, day0)
	want := []string{"R20261129-07", "R20261129-100", "R20261128-05", "R20261129-12"}
	var gs []string
	for _, id := range got {
		gs = append(gs, id.String())
	}
	if !slices.Equal(gs, want) {
		t.Errorf("FindRefs = %v\nwant %v", gs, want)
	}
	if got := requests.FindRefs("nothing to see", day0); len(got) != 0 {
		t.Errorf("FindRefs(no refs) = %v", got)
	}
	// Short forms are relative to the day given.
	got = requests.FindRefs("R-03 and R20261130-03", day0.AddDate(0, 0, 1))
	if len(got) != 1 || got[0].String() != "R20261130-03" {
		t.Errorf("FindRefs next day = %v, want one R20261130-03", got)
	}
}

// String and Key are built without fmt, and are what fmt built: the keys of
// a store written by an older bridge are found again.
func TestIDIsWhatFmtWrote(t *testing.T) {
	for _, day := range []time.Time{time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)} {
		for _, n := range []int{1, 7, 10, 99, 100, 12345, 1234567890, 98765432101} {
			id := requests.NewID(day, n)
			d := day.Year()*10000 + int(day.Month())*100 + day.Day()
			if got, want := id.String(), fmt.Sprintf("R%08d-%02d", d, n); got != want {
				t.Errorf("String = %q, want %q", got, want)
			}
			if got, want := id.Key(), fmt.Sprintf("%08d-%010d", d, n); got != want {
				t.Errorf("Key = %q, want %q", got, want)
			}
		}
	}
}

// ParseID reads by hand what the regexp ^R([0-9]{8})-([0-9]{2,9})$ with a
// real day and a counter as %02d writes it accepted: the same IDs, the
// same values, for strings made of the characters an ID has.
func TestParseIDIsTheRegexp(t *testing.T) {
	full := regexp.MustCompile(`^R([0-9]{8})-([0-9]{2,9})$`)
	old := func(s string) (string, bool) {
		m := full.FindStringSubmatch(s)
		if m == nil {
			return "", false
		}
		if _, err := time.Parse("20060102", m[1]); err != nil {
			return "", false
		}
		n, _ := strconv.Atoi(m[2])
		if n == 0 || fmt.Sprintf("%02d", n) != m[2] {
			return "", false
		}
		return fmt.Sprintf("R%s-%02d", m[1], n), true
	}
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.StringMatching(`R[0-9]{6,10}-[0-9]{0,11}`),
			rapid.StringMatching(`R(19|20|99|00)[0-9]{2}(0[0-9]|1[0-3])[0-3][0-9]-0?[0-9]{1,9}`),
			rapid.StringOfN(rapid.RuneFrom([]rune("R-0123456789x é")), 0, 22, -1),
		).Draw(t, "s")
		want, ok := old(s)
		id, err := requests.ParseID(s)
		if ok != (err == nil) || (ok && id.String() != want) {
			t.Fatalf("ParseID(%q) = %v, %v; the regexp said %q, %v", s, id, err, want, ok)
		}
	})
}
