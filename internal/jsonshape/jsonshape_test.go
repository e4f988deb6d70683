package jsonshape

import (
	"slices"
	"testing"
)

func TestDiff(t *testing.T) {
	want := `{"ok":true,"ts":"1.2","message":{"ts":"1.2","n":1},"list":[{"a":"x"}]}`
	for _, tc := range []struct {
		got    string
		subset bool
		diffs  []string
	}{
		{`{"ok":false,"ts":"9","message":{"ts":"3","n":7},"list":[{"a":"y"}]}`, false, nil},
		{`{"ok":true,"ts":1,"message":{"ts":"1.2"},"list":[{"a":"x","b":1}],"extra":null}`, false, []string{
			"$.extra: not in the recorded answer", "$.list[0].b: not in the recorded answer",
			"$.message.n: missing (recorded number)", "$.ts: number, recorded string"}},
		{`{"ok":true,"message":{"ts":"1.2"}}`, true, nil},
	} {
		got, err := Diff([]byte(tc.got), []byte(want), tc.subset)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.diffs) {
			t.Errorf("Diff(%s) = %q, want %q", tc.got, got, tc.diffs)
		}
	}
	if _, err := Diff([]byte("{"), []byte(want), false); err == nil {
		t.Error("Diff of a document that is not JSON: no error")
	}
}
