package approvals

// RenderInSweep makes s's sweeps render every effect of an expiry in the
// sweep's transaction, as an expiry by a late decision does (tests compare
// both ways).
func RenderInSweep(s *Service) { s.renderInSweep = true }

// Encode is a's record as the store keeps it.
func Encode(a *Approval) ([]byte, error) { return a.encode() }

// InboxKey is the inbox index's key of a in room.
var InboxKey = inboxKey
