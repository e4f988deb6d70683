package clip

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// feishu is what a Feishu room sends: Chinese with full-width punctuation.
const feishu = "请把部署流程写成文档，发到飞书群里。"

func TestText(t *testing.T) {
	family := "👨\u200d👩\u200d👧" // one emoji of five code points
	for _, c := range []struct {
		name, in string
		limit    int
		unit     Unit
		want     string
	}{
		{"ascii fits", "hello", 5, Runes, "hello"},
		{"ascii cut", "hello world", 8, Runes, "hello w…"},
		{"ascii bytes", "hello world", 8, Bytes, "hello…"},
		{"empty", "", 0, Bytes, ""},
		{"zero", "abc", 0, Runes, ""},
		{"negative", "abc", -1, Bytes, ""},
		{"no room for the marker", "hello", 2, Bytes, "he"},
		{"only the marker", "hello", 1, Runes, "…"},
		{"cjk fits in runes", feishu, 18, Runes, feishu},
		{"cjk runes", feishu, 6, Runes, "请把部署流…"},
		{"cjk bytes on a boundary", feishu, 18, Bytes, "请把部署流…"},
		{"cjk bytes mid-character", feishu, 20, Bytes, "请把部署流…"},
		{"cjk bytes one short", feishu, 17, Bytes, "请把部署…"},
		{"cjk bytes too small for one", feishu, 5, Bytes, "…"},
		{"cjk bytes no marker", feishu, 2, Bytes, ""},
		{"emoji bytes", "ok 😀😀", 10, Bytes, "ok 😀…"},
		{"zwj family kept whole", "hi " + family + family, 9, Runes, "hi " + family + "…"},
		{"zwj family not split", "hi " + family, 6, Runes, "hi …"},
		{"zwj family alone", family + family, 4, Runes, "👨\u200d👩…"},
		{"combining accent kept with its letter", "cafe\u0301 noir", 5, Runes, "caf…"},
		{"combining accent bytes", "cafe\u0301 noir", 7, Bytes, "caf…"},
		{"skin tone", "hi 👍🏽 ok", 5, Runes, "hi …"},
		{"variation selector", "a ❤\ufe0f b", 4, Runes, "a …"},
		{"flags in pairs", "🇨🇳🇯🇵🇺🇸", 4, Runes, "🇨🇳…"},
		{"flags at a pair boundary", "🇨🇳🇯🇵🇺🇸", 5, Runes, "🇨🇳🇯🇵…"},
		{"invalid fits", "a\xffb", 3, Bytes, "a\xffb"},
		{"invalid counts one rune a byte", "\xff\xfe\xfd\xfc", 3, Runes, "\xff\xfe…"},
		{"truncated sequence", "ab\xe4\xb8", 3, Runes, "ab…"},
		{"invalid then cjk", "\xff中文字", 7, Bytes, "\xff中…"},
	} {
		got := Text(c.in, c.limit, c.unit)
		if got != c.want {
			t.Errorf("%s: Text(%q, %d) = %q, want %q", c.name, c.in, c.limit, got, c.want)
		}
	}
}

func TestLine(t *testing.T) {
	for _, c := range []struct {
		in    string
		limit int
		unit  Unit
		want  string
	}{
		{"  two\nlines\t here ", 80, Bytes, "two lines here"},
		{feishu + "\n\n" + feishu, 30, Runes, feishu + " 请把部署流程写成文档…"},
		{"第一行\r\n第二行", 100, Bytes, "第一行 第二行"},
		{"第一行\n第二行", 12, Bytes, "第一行…"},
	} {
		if got := Line(c.in, c.limit, c.unit); got != c.want {
			t.Errorf("Line(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
		}
	}
}

// FuzzClip checks the contract of Text on any input and bound: never
// longer than the bound; unchanged when it fits; otherwise a prefix of the
// input cut between two of its characters, then the marker (if it fits);
// valid UTF-8 whenever the input is.
func FuzzClip(f *testing.F) {
	for _, s := range []string{"", "hello world", feishu, strings.Repeat(feishu, 20),
		"👨\u200d👩\u200d👧\u200d👦 family", "cafe\u0301 e\u0301\u0301\u0301", "🇨🇳🇯🇵🇺🇸🇨", "👍🏽👍🏿", "❤\ufe0f\u20e3",
		"\xff\xe4\xb8", "a\xe4\xb8\xadb", "飞书 Feishu 😀 mixed 中文"} {
		for _, limit := range []int{0, 1, 3, 7, 20, 100} {
			f.Add(s, limit, limit%2 == 1)
		}
	}
	f.Fuzz(func(t *testing.T, s string, limit int, bytes bool) {
		u := Runes
		if bytes {
			u = Bytes
		}
		got := Text(s, limit, u)
		if n := size(got, u); n > max(limit, 0) {
			t.Fatalf("Text(%q, %d, %d) = %q: %d long", s, limit, u, got, n)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Text(%q, %d, %d) = %q: not UTF-8", s, limit, u, got)
		}
		if size(s, u) <= limit {
			if got != s {
				t.Fatalf("Text(%q, %d, %d) = %q: changed though it fits", s, limit, u, got)
			}
			return
		}
		head, marked := strings.CutSuffix(got, Marker)
		if !marked && size(Marker, u) <= limit || !strings.HasPrefix(s, head) {
			t.Fatalf("Text(%q, %d, %d) = %q: not a prefix of the input and the marker", s, limit, u, got)
		}
		if !slices.Equal(append([]rune(head), []rune(s[len(head):])...), []rune(s)) {
			t.Fatalf("Text(%q, %d, %d) = %q: cut inside a character", s, limit, u, got)
		}
		if line := Line(s, limit, u); size(line, u) > max(limit, 0) || strings.ContainsAny(line, "\n\r\t") {
			t.Fatalf("Line(%q, %d, %d) = %q", s, limit, u, line)
		}
	})
}
