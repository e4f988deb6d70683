package approvals

// RenderInSweep makes s's sweeps render every effect of an expiry in the
// sweep's transaction, as an expiry by a late decision does (tests compare
// both ways).
func RenderInSweep(s *Service) { s.renderInSweep = true }
