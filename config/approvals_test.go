package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// approvals.remind: one reminder 1 h before by default, remind: [] for none,
// and a bad entry is an error naming the key.
func TestApprovalsRemind(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Approvals.Remind, []time.Duration{time.Hour}) {
		t.Errorf("default remind %v, want [1h]", c.Approvals.Remind)
	}
	if d := Default("bridge").Approvals.Remind; !slices.Equal(d, []time.Duration{time.Hour}) {
		t.Errorf("the no-config run reminds %v, want [1h]", d)
	}
	c, err = Parse([]byte(minimal + "approvals: {remind: []}\n"))
	if err != nil || len(c.Approvals.Remind) != 0 {
		t.Fatalf("remind: []: %v, %v", c, err)
	}
	for _, bad := range []string{"[-1h]", "[0s]", "[1h, 1h]"} {
		_, err := Parse([]byte(minimal + "approvals: {remind: " + bad + "}\n"))
		if err == nil || !strings.Contains(err.Error(), "approvals.remind") {
			t.Errorf("remind %s: %v, want an error naming approvals.remind", bad, err)
		}
	}
}
