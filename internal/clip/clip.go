// Package clip cuts text to a length bound for cards, messages, audit
// details and terminal columns. The cut falls at a character boundary, never
// inside a UTF-8 sequence and, as far as it can tell, not between a
// character and the marks, joiners or modifiers that extend it (an accent,
// the rest of a ZWJ emoji, a skin tone, the second half of a flag), and it
// is marked with "…". What comes out is a prefix of what went in.
package clip

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Marker ends a text that was cut.
const Marker = "…"

// Unit is what a bound counts.
type Unit uint8

const (
	// Runes counts characters (Unicode code points; a byte that is not
	// UTF-8 counts as one), as Slack and Feishu count their limits.
	Runes Unit = iota
	// Bytes counts bytes, for fields bounded in size: audit details,
	// notices, the actions people approve.
	Bytes
)

// Text returns s unchanged if it is at most limit long (counted in u), else
// its longest prefix that ends at a character boundary and leaves room for
// Marker, followed by Marker: the result is never longer than limit. A bound
// too small for the marker (under 1 rune or 3 bytes) cuts without it.
func Text(s string, limit int, u Unit) string {
	if size(s, u) <= limit {
		return s
	}
	mark := Marker
	if size(mark, u) > limit {
		mark = ""
	}
	return s[:boundary(s, limit-size(mark, u), u)] + mark
}

// Cut is the end of the prefix of s that Text keeps for a bound of limit,
// without the marker: len(s) when s fits, else the end of its longest
// prefix at most limit long that does not split a character.
func Cut(s string, limit int, u Unit) int {
	if size(s, u) <= limit {
		return len(s)
	}
	return boundary(s, limit, u)
}

// Line is Text of s made one line first: each run of white space (newlines
// and tabs included) becomes one space, and white space at either end goes.
func Line(s string, limit int, u Unit) string {
	return Text(strings.Join(strings.Fields(s), " "), limit, u)
}

func size(s string, u Unit) int {
	if u == Bytes {
		return len(s)
	}
	return utf8.RuneCountInString(s)
}

// boundary is the end of the longest prefix of s at most budget long that
// does not split a character, moved back to the start of the character its
// cut would split from its marks (unless that leaves nothing).
func boundary(s string, budget int, u Unit) int {
	end, n := 0, 0
	for end < len(s) {
		_, w := utf8.DecodeRuneInString(s[end:])
		step := 1
		if u == Bytes {
			step = w
		}
		if n+step > budget {
			break
		}
		end, n = end+w, n+step
	}
	for i := end; i > 0; {
		if !joined(s[:i], s[i:]) {
			return i
		}
		_, w := utf8.DecodeLastRuneInString(s[:i])
		i -= w
	}
	return end
}

const zwj = '\u200d'

// joined reports whether a cut between head and tail would split one
// character as people see it: tail starts with a mark, joiner, variation
// selector, skin tone or tag; head ends with a zero-width joiner; or the
// cut falls inside a flag (between the two regional indicators of a pair).
func joined(head, tail string) bool {
	last, _ := utf8.DecodeLastRuneInString(head)
	next, _ := utf8.DecodeRuneInString(tail)
	switch {
	case last == zwj || extends(next):
		return true
	case regional(last) && regional(next):
		n := 0
		for h := head; h != ""; n++ {
			r, w := utf8.DecodeLastRuneInString(h)
			if !regional(r) {
				break
			}
			h = h[:len(h)-w]
		}
		return n%2 == 1
	}
	return false
}

// extends reports whether r belongs to the character before it.
func extends(r rune) bool {
	return r == zwj || unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc, unicode.Variation_Selector) ||
		r >= 0x1F3FB && r <= 0x1F3FF || // skin tones
		r >= 0xE0020 && r <= 0xE007F // tags (subdivision flags)
}

func regional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }
