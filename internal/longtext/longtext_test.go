package longtext_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/roombridge/roombridge/internal/cardtest"
	"github.com/roombridge/roombridge/internal/longtext"
)

var mark = regexp.MustCompile(`\n\n\(part \d+/\d+\)$`)

// TestSplitKeepsEverything: for random text (CJK, joined emoji, marks) and budgets, each part is
// within the budget, no part begins inside a character people see as one, the parts hold the whole
// text, and a text that needs more than MaxParts parts is a file holding it, whose message fits.
func TestSplitKeepsEverything(t *testing.T) {
	g := cardtest.New(7)
	for i := range 300 {
		text := g.Text(1 + i*37%5000)
		budget := 40 + i*13%900
		p := longtext.Split(text, budget, longtext.Runes, "R1", "k")
		var whole strings.Builder
		for j, part := range p.Parts {
			if n := utf8.RuneCountInString(part); n > budget {
				t.Fatalf("text %d, part %d: %d runes, budget %d", i, j, n, budget)
			}
			first, _ := utf8.DecodeRuneInString(part)
			if j > 0 && p.File == nil && (first == '\u200d' || unicode.Is(unicode.Mn, first) || first >= 0x1F3FB && first <= 0x1F3FF) {
				t.Fatalf("text %d, part %d begins with %U: a character was split", i, j, first)
			}
			whole.WriteString(mark.ReplaceAllString(part, ""))
		}
		switch {
		case p.File != nil:
			if p.File.Content != text || len(p.Parts) != 1 || !longtext.IsFileOf(p.File.Name, "k") {
				t.Fatalf("text %d: file %q of %d bytes, %d messages", i, p.File.Name, len(p.File.Content), len(p.Parts))
			}
		case len(p.Parts) > longtext.MaxParts:
			t.Fatalf("text %d: %d parts", i, len(p.Parts))
		case strings.Join(strings.Fields(whole.String()), "") != strings.Join(strings.Fields(text), ""):
			t.Fatalf("text %d: the parts are not the text", i)
		}
	}
}

// TestKeys: the last post of an effect carries its key, the others their own.
func TestKeys(t *testing.T) {
	got := []string{longtext.Key("K", 0, 3), longtext.Key("K", 1, 3), longtext.Key("K", 2, 3), longtext.Key("", 0, 2)}
	if want := []string{"K#1", "K#2", "K", ""}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("keys %q, want %q", got, want)
	}
}
