package slack

import (
	"fmt"
	"regexp"
)

var partMark = regexp.MustCompile(`\n\n\(part \d+/\d+\)`)

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }
