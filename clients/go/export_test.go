package bakery

// SessionIDOf is the id of the session holding g (for tests that act on
// the session behind the client's back).
func SessionIDOf(g *Grant) string { return g.s.id }
