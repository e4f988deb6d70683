package jsonx

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

// Each appender writes what encoding/json or fmt writes.
func TestAppendersAreWhatTheStandardLibraryWrites(t *testing.T) {
	for _, s := range []string{"", "slack/R20261201-01", `"q" \ b`, "<a>&", "\x00\x1f\x7f", "é · — 日本", "\u2028\u2029", "\xff\xfe", "ok"} {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	}
	for _, at := range []time.Time{{}, time.Unix(0, 1).UTC(), time.Date(2026, 12, 1, 11, 30, 5, 123456789, time.FixedZone("x", 5*3600+1800))} {
		want, _ := json.Marshal(at)
		if got := AppendTime(nil, at); string(got) != string(want) {
			t.Errorf("AppendTime(%v) = %s, want %s", at, got, want)
		}
	}
	for _, n := range []int64{0, 7, -7, 1795953600000, -1795953600000, 12345678901234, math.MaxInt64, math.MinInt64} {
		if got, want := string(AppendPadded(nil, n, 13)), fmt.Sprintf("%013d", n); got != want {
			t.Errorf("AppendPadded(%d, 13) = %q, want %q", n, got, want)
		}
	}
	for _, n := range []uint64{0, 9, 1 << 40, math.MaxUint64} {
		if got, want := string(AppendPaddedUint(nil, n, 20)), fmt.Sprintf("%020d", n); got != want {
			t.Errorf("AppendPaddedUint(%d, 20) = %q, want %q", n, got, want)
		}
	}
}

// A record prepared without its sequence number gets another one in its
// place; one that does not begin with "seq" is not prepared.
func TestSeqRecordSplicesTheNumber(t *testing.T) {
	r := PrepareSeq([]byte(`{"seq":0,"a":"x"}`))
	if got := string(r.With(18446744073709551615)); got != `{"seq":18446744073709551615,"a":"x"}` {
		t.Errorf("With = %s", got)
	}
	if got := string(PrepareSeq([]byte(`{"seq":123}`)).With(7)); got != `{"seq":7}` {
		t.Errorf("With = %s", got)
	}
	for _, b := range []string{``, `{"seq":`, `{"a":1,"seq":0}`, `{"sequence":1}`} {
		if r := PrepareSeq([]byte(b)); r != nil {
			t.Errorf("PrepareSeq(%s) = %s, want nil", b, r)
		}
	}
}
