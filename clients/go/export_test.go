package bakery

// SessionIDOf is the id of the session holding g (for tests that act on
// the session behind the client's back).
func SessionIDOf(g *Grant) string { return g.s.id }

// CleanUpsDone counts the clean-ups after acquires of unknown outcome that
// ran to their end (released what they found, or deferred to an acquire in
// flight).
func CleanUpsDone(c *Client) int64 { return c.cleanUps.Load() }
