package bakery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The families of the lock routes (`/v1/{family}/{name}/...`).
const (
	familyLocks      = "locks"
	familySemaphores = "semaphores"
	familyRWLocks    = "rwlocks"
	familyElections  = "elections"
)

// maxPoll is the longest wait of one acquire request (the server's limit).
const maxPoll = 60 * time.Second

// Grant is a lock, permit, read/write hold or leadership held by the
// client's session. Send Token with every write made under the grant. When
// Lost fires, stop working under it: a waiter may already hold it.
type Grant struct {
	c      *Client
	s      *session
	family string
	name   string
	token  uint64

	lost     chan struct{}
	lostOnce sync.Once
	released atomic.Bool
}

// Name is the name of the lock, semaphore, RW lock or election.
func (g *Grant) Name() string { return g.name }

// Token is the grant's fencing token: larger than every earlier grant's of
// the same name.
func (g *Grant) Token() uint64 { return g.token }

// Lost is closed once the grant is lost: the server answered `held: false`
// for it, its session ended (a keepalive answered 404, or none got through
// for a whole TTL), a release answered `lost`, or the client was closed
// while holding it. It is never closed by a successful Release.
func (g *Grant) Lost() <-chan struct{} { return g.lost }

// IsLost reports whether Lost has fired.
func (g *Grant) IsLost() bool {
	select {
	case <-g.lost:
		return true
	default:
		return false
	}
}

func (g *Grant) lose(why string, quiet bool) {
	g.lostOnce.Do(func() {
		if quiet {
			g.c.log.Debug("bakery: grant given up", "family", g.family, "name", g.name, "token", g.token, "why", why)
		} else if !g.released.Load() {
			g.c.log.Warn("bakery: grant lost", "family", g.family, "name", g.name, "token", g.token, "why", why)
		}
		close(g.lost)
	})
}

// Context returns a context derived from parent that is cancelled when the
// grant is lost (or when cancel is called).
func (g *Grant) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-g.lost:
			cancel(fmt.Errorf("bakery: %s %q (token %d) lost: %w", g.family, g.name, g.token, ErrLost))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

type releaseBody struct {
	Session string `json:"session"`
	Token   uint64 `json:"token"`
}

// Release gives the grant back; in the same write the next waiter is
// served. It answers an error of kind [KindLost] if the grant had been
// lost (whatever was done under it may have overlapped the next holder),
// and [KindNotFound] if the server did not find it (the grant had ended, or
// its whole session had: the session is read to tell which, and only in
// the second case are the session's other grants lost too). A release is
// resent only when the connection was refused. A release whose outcome is
// unknown is not resent (closing the client releases it). Releasing twice
// does nothing the second time.
func (g *Grant) Release(ctx context.Context) error {
	if !g.released.CompareAndSwap(false, true) {
		return nil
	}
	g.s.unregister(g)
	if g.IsLost() {
		return &Error{Kind: KindLost, Op: "release", Message: fmt.Sprintf("%s %q (token %d) was lost before its release", g.family, g.name, g.token)}
	}
	// Resent only if the connection was refused: after an answered 503 the
	// server has already taken the grant out of the session.
	_, err := g.c.do(ctx, call{method: "POST", path: "/v1/" + g.family + "/" + escape(g.name) + "/release",
		body: releaseBody{Session: g.s.id, Token: g.token}, retry: retryRefused})
	if err != nil {
		switch KindOf(err) {
		case KindLost:
			g.lose("its release answered lost", false)
		case KindNotFound:
			// The grant is not in the session, or the session is gone:
			// only reading the session tells which.
			g.lose("its release answered not_found", false)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.c.requestTimeout)
			g.s.checkAlive(rctx, "a release answered not_found and the session is gone")
			cancel()
		}
	}
	return err
}

type acquireBody struct {
	Session   string  `json:"session"`
	TimeoutMs *int64  `json:"timeout_ms,omitempty"`
	Permits   *uint32 `json:"permits,omitempty"`
	Mode      *Mode   `json:"mode,omitempty"`
	Data      *string `json:"data,omitempty"`
}

type acquired struct {
	Granted bool    `json:"granted"`
	Token   *uint64 `json:"token"`
}

// acquire waits for a grant of family/name (or, with try, takes it only if
// free), repeating the server's long poll until ctx ends.
func (c *Client) acquire(ctx context.Context, family, name string, body acquireBody, try bool) (*Grant, error) {
	op := "acquire"
	if try {
		op = "try"
	}
	path := "/v1/" + family + "/" + escape(name) + "/" + op
	k := nameKey{family, name}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bakery: %s %s %q: %w", op, family, name, err)
		}
		s, err := c.sess.get(ctx)
		if err != nil {
			return nil, err
		}
		b := body
		b.Session = s.id
		var wait time.Duration
		if !try {
			wait = maxPoll
			if dl, ok := ctx.Deadline(); ok {
				rem := time.Until(dl)
				// Leave the answer time to arrive before the deadline, so
				// that the deadline passes between polls, not during one.
				rem -= min(200*time.Millisecond, rem/4)
				if rem < 15*time.Millisecond {
					return nil, fmt.Errorf("bakery: %s %s %q: %w", op, family, name, context.DeadlineExceeded)
				}
				wait = min(wait, rem)
			}
			ms := wait.Milliseconds()
			b.TimeoutMs = &ms
		}
		s.begin(k)
		var out acquired
		_, err = c.do(ctx, call{method: "POST", path: path, body: b, out: &out, retry: retryUnavailable, wait: wait})
		if err != nil {
			s.finish(k)
			switch KindOf(err) {
			case KindNotFound:
				// The only thing an acquire can miss is its session: it
				// ended on the server. Open a new one.
				s.endAndForget("an acquire answered not_found")
				continue
			case KindUnknownOutcome:
				// It may have been granted: give back what we do not know of.
				s.cleanUp(k)
			}
			return nil, err
		}
		if out.Granted && out.Token != nil {
			g := &Grant{c: c, s: s, family: family, name: name, token: *out.Token, lost: make(chan struct{})}
			// Registered before the acquire counts as finished, so that a
			// clean-up never takes it for a leaked grant.
			s.register(g)
			s.finish(k)
			return g, nil
		}
		s.finish(k)
		if try {
			return nil, nil
		}
	}
}

// QueueState is the stored state of a lock, semaphore, RW lock or election:
// who holds it and who waits.
type QueueState struct {
	Family  string  `json:"family"`
	Name    string  `json:"name"`
	Token   uint64  `json:"token"`
	Permits *uint32 `json:"permits"`
	Holders []Party `json:"holders"`
	Queue   []Party `json:"queue"`
}

// Party is a holder or a waiter.
type Party struct {
	Owner   string  `json:"owner"`
	LeaseMs uint64  `json:"lease_ms"`
	Data    *string `json:"data"`
	Mode    *Mode   `json:"mode"`
	Token   *uint64 `json:"token"`
}

func (c *Client) state(ctx context.Context, family, name string) (*QueueState, error) {
	var st QueueState
	if _, err := c.do(ctx, call{method: "GET", path: "/v1/" + family + "/" + escape(name), out: &st, retry: retryUnknown}); err != nil {
		return nil, err
	}
	return &st, nil
}

// do runs fn while holding g (its context ends if g is lost), then
// releases g. fn's error and the release's are both returned.
func do(ctx context.Context, g *Grant, fn func(ctx context.Context, g *Grant) error) (err error) {
	gctx, cancel := g.Context(ctx)
	defer func() {
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), g.c.requestTimeout)
		defer rcancel()
		err = errors.Join(err, g.Release(rctx))
	}()
	return fn(gctx, g)
}

// Lock is a mutual-exclusion lock: one holder at a time, first come first
// served.
type Lock struct {
	c    *Client
	name string
	data *string
}

// Lock returns the lock name (letters, digits and `_ - . : @ + =`). It does
// no I/O.
func (c *Client) Lock(name string) *Lock { return &Lock{c: c, name: name} }

// WithData returns a copy of l that stores data with its grants (readable
// by everyone through State; at most 1,024 bytes).
func (l *Lock) WithData(data string) *Lock { l2 := *l; l2.data = &data; return &l2 }

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Acquire waits until the lock is granted, or ctx ends (then the error
// wraps ctx.Err()).
func (l *Lock) Acquire(ctx context.Context) (*Grant, error) {
	return l.c.acquire(ctx, familyLocks, l.name, acquireBody{Data: l.data}, false)
}

// TryAcquire takes the lock only if it is free and nobody waits; it never
// queues. ok is false if the lock is busy.
func (l *Lock) TryAcquire(ctx context.Context) (g *Grant, ok bool, err error) {
	g, err = l.c.acquire(ctx, familyLocks, l.name, acquireBody{Data: l.data}, true)
	return g, g != nil, err
}

// Do acquires the lock, runs fn while holding it (fn's context is cancelled
// if the grant is lost) and releases it.
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context, g *Grant) error) error {
	g, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	return do(ctx, g, fn)
}

// State reads who holds the lock and who waits.
func (l *Lock) State(ctx context.Context) (*QueueState, error) {
	return l.c.state(ctx, familyLocks, l.name)
}

// Semaphore lets up to a number of holders at once, first come first
// served.
type Semaphore struct {
	c       *Client
	name    string
	permits uint32
}

// Semaphore returns the semaphore name with permits holders at most (every
// user of the name must give the same number). It does no I/O.
func (c *Client) Semaphore(name string, permits uint32) *Semaphore {
	return &Semaphore{c: c, name: name, permits: permits}
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Acquire waits for a permit until ctx ends.
func (s *Semaphore) Acquire(ctx context.Context) (*Grant, error) {
	p := s.permits
	return s.c.acquire(ctx, familySemaphores, s.name, acquireBody{Permits: &p}, false)
}

// TryAcquire takes a permit only if one is free and nobody waits.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Grant, bool, error) {
	p := s.permits
	g, err := s.c.acquire(ctx, familySemaphores, s.name, acquireBody{Permits: &p}, true)
	return g, g != nil, err
}

// Do acquires a permit, runs fn while holding it and releases it.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, g *Grant) error) error {
	g, err := s.Acquire(ctx)
	if err != nil {
		return err
	}
	return do(ctx, g, fn)
}

// State reads who holds permits and who waits.
func (s *Semaphore) State(ctx context.Context) (*QueueState, error) {
	return s.c.state(ctx, familySemaphores, s.name)
}

// Mode is an RW lock's mode.
type Mode string

// The modes of an RW lock.
const (
	Read  Mode = "read"
	Write Mode = "write"
)

// RWLock is held by one writer or by many readers.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the RW lock name. It does no I/O.
func (c *Client) RWLock(name string) *RWLock { return &RWLock{c: c, name: name} }

// Name is the RW lock's name.
func (l *RWLock) Name() string { return l.name }

// Acquire waits for the lock in mode until ctx ends.
func (l *RWLock) Acquire(ctx context.Context, mode Mode) (*Grant, error) {
	m := mode
	return l.c.acquire(ctx, familyRWLocks, l.name, acquireBody{Mode: &m}, false)
}

// TryAcquire takes the lock in mode only if it can be granted now and
// nobody waits.
func (l *RWLock) TryAcquire(ctx context.Context, mode Mode) (*Grant, bool, error) {
	m := mode
	g, err := l.c.acquire(ctx, familyRWLocks, l.name, acquireBody{Mode: &m}, true)
	return g, g != nil, err
}

// RLock waits for a read hold (shared with other readers).
func (l *RWLock) RLock(ctx context.Context) (*Grant, error) { return l.Acquire(ctx, Read) }

// Lock waits for the write hold (exclusive).
func (l *RWLock) Lock(ctx context.Context) (*Grant, error) { return l.Acquire(ctx, Write) }

// Do acquires the lock in mode, runs fn while holding it and releases it.
func (l *RWLock) Do(ctx context.Context, mode Mode, fn func(ctx context.Context, g *Grant) error) error {
	g, err := l.Acquire(ctx, mode)
	if err != nil {
		return err
	}
	return do(ctx, g, fn)
}

// State reads who holds the lock (and in which mode) and who waits.
func (l *RWLock) State(ctx context.Context) (*QueueState, error) {
	return l.c.state(ctx, familyRWLocks, l.name)
}
