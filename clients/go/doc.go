// Package bakery is a client of `bakery serve`, the HTTP/JSON service of
// bakery: unique monotonic ids from sequences with local block
// reservation, fair fenced locks (Lock, Semaphore, RWLock, Election) and
// exactly-once processing (Once), on the database the service runs on.
//
// A Client opens one session lazily and keeps it alive in the background;
// the grants it holds live with it. A grant's Lost channel fires when the
// grant is lost (stop working under it: a waiter may hold it now). Errors
// are *Error values carrying the server's Kind; match them with errors.Is
// and the sentinels (ErrLost, ErrUnavailable, ...).
//
// Retries never resend a write of unknown outcome: a call refused at
// connect or answered 503 unavailable is retried with backoff (release,
// complete and fail only when the connection was refused); acquire,
// release, claim, complete and fail are not resent after an unknown
// outcome (the error reaches the caller); a block reservation is, since a
// block reserved twice only leaves a gap.
package bakery
