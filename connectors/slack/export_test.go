package slack

// LiveMessages is how many live messages c keeps in memory (fallback
// replies and native streams' shown text), for tests that check none is
// left once its stream ended.
func LiveMessages(c *Connector) int {
	c.live.mu.Lock()
	defer c.live.mu.Unlock()
	return len(c.live.fallback) + len(c.live.shown)
}
