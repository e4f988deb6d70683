package chat

import "testing"

func TestLinkText(t *testing.T) {
	for _, tc := range []struct{ label, url, want string }{
		{"the doc", "https://x.test/a", "the doc (https://x.test/a)"},
		{"", "https://x.test/a", "https://x.test/a"},
		{"https://x.test/a", "https://x.test/a", "https://x.test/a"},
		{"x.test", "http://x.test", "http://x.test"},
		{"a@x.test", "mailto:a@x.test", "a@x.test"},
		{"label", "", "label"},
	} {
		if got := LinkText(tc.label, tc.url); got != tc.want {
			t.Errorf("LinkText(%q, %q) = %q, want %q", tc.label, tc.url, got, tc.want)
		}
	}
}
