package core

import (
	"strconv"

	"github.com/roombridge/roombridge/store"
	"github.com/roombridge/roombridge/store/migrate"
)

// maxFormat, set at link time (-ldflags "-X
// github.com/roombridge/roombridge/core.maxFormat=1"), makes this binary
// know only the formats up to it: the tests' "old binary" of a rolling
// upgrade. Empty: every step this source has.
var maxFormat string

// steps are the store's migrations, in order: steps[i] produces format i+2.
var steps = []migrate.Step{migrate.LeanDedupe}

// Migrations returns the steps this binary knows, up to KnownFormat.
func Migrations() []migrate.Step {
	known := KnownFormat()
	var out []migrate.Step
	for _, s := range steps {
		if s.To <= known {
			out = append(out, s)
		}
	}
	return out
}

// KnownFormat is the newest store format this binary knows: the last
// step's, store.UnversionedFormat without steps, lowered by maxFormat.
func KnownFormat() int {
	known := store.UnversionedFormat
	if len(steps) > 0 {
		known = steps[len(steps)-1].To
	}
	if n, err := strconv.Atoi(maxFormat); err == nil && n >= store.UnversionedFormat && n < known {
		known = n
	}
	return known
}
