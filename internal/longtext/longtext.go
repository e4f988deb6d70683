// Package longtext decides how a text too long for one chat message is
// delivered, the same way on every surface: in a few parts, each marked
// with its place ("(part 2/3)"), or, beyond MaxParts, as a Markdown file
// with a short message that says so and shows how the text begins. Nothing
// is cut silently. It also names the idempotency key of each post such a
// delivery makes (Key), so a retried delivery posts no part twice.
package longtext

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/roombridge/roombridge/internal/clip"
)

// MaxParts is the most messages a text is split into; a longer text is
// attached as a file.
const MaxParts = 3

// previewRunes bounds the beginning of the text the file's message shows.
const previewRunes = 500

// Cost is what one character costs of a message's budget: 1 for a
// platform that counts characters, more where it is escaped (Slack's
// &amp;) or counted in encoded bytes (Feishu).
type Cost func(r rune) int

// Runes counts characters.
func Runes(rune) int { return 1 }

// Plan is how a text goes out.
type Plan struct {
	// Parts are the messages to post, in order: the text itself when it
	// fits one message; its parts, each marked; or, with File, the
	// message that tells of the file.
	Parts []string
	// File, when set, is the whole text attached as a file.
	File *File
}

// File is a text attached as a file.
type File struct {
	Name    string // "<request>-<6 hex digits of the key>.md"
	Title   string
	Content string
}

// Split plans text for messages of at most budget (counted by cost):
// one message if it fits, else up to MaxParts parts cut at a paragraph,
// line or word boundary where there is one near the end of the budget,
// else a file named after request and key (the effect's idempotency key:
// the same effect always makes the same file name).
func Split(text string, budget int, cost Cost, request, key string) Plan {
	if Fits(text, budget, cost) {
		return Plan{Parts: []string{text}}
	}
	mark := partMark(MaxParts, MaxParts)
	room := budget - measure(mark, cost)
	var parts []string
	for rest := text; rest != "" && len(parts) <= MaxParts; {
		head := cut(rest, room, cost)
		parts = append(parts, head)
		rest = rest[len(head):]
	}
	if len(parts) <= MaxParts {
		for i := range parts {
			parts[i] = strings.TrimRight(parts[i], " \n") + partMark(i+1, len(parts))
		}
		return Plan{Parts: parts}
	}
	f := &File{Name: fileName(request, key), Content: text}
	f.Title = f.Name
	notice := fmt.Sprintf("The answer is too long for %d messages (%d characters): it is attached as %s. It begins:\n\n%s",
		MaxParts, utf8.RuneCountInString(text), f.Name, clip.Text(text, previewRunes, clip.Runes))
	return Plan{Parts: []string{cut(notice, budget, cost)}, File: f}
}

// Key is the idempotency key of post i (from 0) of n made for one effect
// whose key is key: the last post carries the effect's own key, so that
// finding it means every post went out; the others carry key + "#i".
func Key(key string, i, n int) string {
	if key == "" || i == n-1 {
		return key
	}
	return fmt.Sprintf("%s#%d", key, i+1)
}

func partMark(i, n int) string { return fmt.Sprintf("\n\n(part %d/%d)", i, n) }

func fileName(request, key string) string {
	if request == "" {
		request = "answer"
	}
	return request + fileSuffix(key)
}

func fileSuffix(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "-" + hex.EncodeToString(sum[:3]) + ".md"
}

// IsFileOf reports whether name is the name Split gives the file of the
// effect whose idempotency key is key (a lookup of a post in doubt
// recognises the file by it).
func IsFileOf(name, key string) bool { return key != "" && strings.HasSuffix(name, fileSuffix(key)) }

// Fits reports whether text fits one message of budget.
func Fits(text string, budget int, cost Cost) bool { return measure(text, cost) <= budget }

func measure(s string, cost Cost) int {
	n := 0
	for _, r := range s {
		n += cost(r)
	}
	return n
}

// cut returns the longest prefix of s within budget that ends at a
// character boundary (clip's: never inside a character people see as one),
// moved back to the last paragraph, line or space break in its last fifth
// when there is one. It takes at least one character.
func cut(s string, budget int, cost Cost) string {
	end, n := 0, 0
	for end < len(s) {
		r, w := utf8.DecodeRuneInString(s[end:])
		if n+cost(r) > budget {
			break
		}
		end, n = end+w, n+cost(r)
	}
	if end == len(s) {
		return s
	}
	end = clip.Cut(s, utf8.RuneCountInString(s[:end]), clip.Runes)
	if end == 0 {
		_, w := utf8.DecodeRuneInString(s)
		return s[:w]
	}
	floor := end * 4 / 5
	for _, sep := range []string{"\n\n", "\n", " "} {
		if i := strings.LastIndex(s[:end], sep); i > 0 && i+len(sep) > floor {
			return s[:i+len(sep)]
		}
	}
	return s[:end]
}
