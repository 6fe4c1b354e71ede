package groupcommit

// Queued is how many calls wait for a batch, for tests that must know a
// call is queued before they act.
func (c *Committer[Req, Res]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}
