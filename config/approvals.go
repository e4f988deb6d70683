package config

import "time"

// DefaultRemind is approvals.remind when the key is absent: one reminder an
// hour before an approval expires.
var DefaultRemind = []time.Duration{time.Hour}

// setApprovalsDefaults fills approvals.remind when it is absent (an empty
// list, remind: [], turns reminders off).
func (c *Config) setApprovalsDefaults() {
	if c.Approvals.Remind == nil {
		c.Approvals.Remind = append([]time.Duration(nil), DefaultRemind...)
	}
}

// validateRemind checks approvals.remind: durations before the expiry at
// which the approvers who have not decided are reminded; each positive and
// listed once.
func (c *Config) validateRemind() error {
	seen := map[time.Duration]bool{}
	for i, d := range c.Approvals.Remind {
		if d <= 0 {
			return keyErr("approvals.remind", "entry %d (%v) must be positive: a duration before the expiry, like 1h", i+1, d)
		}
		if seen[d] {
			return keyErr("approvals.remind", "%v is listed twice", d)
		}
		seen[d] = true
	}
	return nil
}
