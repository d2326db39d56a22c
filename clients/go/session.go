package bakery

import (
	"context"
	"errors"
	"sync"
	"time"
)

// grantKey identifies a grant in a session.
type grantKey struct {
	family string
	name   string
	token  uint64
}

// nameKey identifies a member of the lock family.
type nameKey struct {
	family string
	name   string
}

// session is one server session of a client, with the grants it holds.
type session struct {
	c   *Client
	id  string
	ttl time.Duration

	mu     sync.Mutex
	grants map[grantKey]*Grant
	// inflight counts acquires in flight per name, across every Lock,
	// Semaphore, RWLock and Election object of the client: a grant of the
	// name the session holds but does not know of may be one of them
	// arriving. pending marks the names whose clean-up waits for their
	// acquires in flight to finish.
	inflight map[nameKey]int
	pending  map[nameKey]bool
	lastOK   time.Time // when the last successful keepalive was sent
	ended    bool
	done     chan struct{} // closed when the session ends (locally)
}

// sessions opens the client's session lazily and keeps it alive.
type sessions struct {
	c       *Client
	mu      sync.Mutex
	cur     *session
	opening chan struct{} // non-nil while a session is being opened
	openErr error
}

func newSessions(c *Client) *sessions { return &sessions{c: c} }

type sessionView struct {
	ID     string      `json:"id"`
	TTLms  uint64      `json:"ttl_ms"`
	Grants []grantView `json:"grants"`
}

type grantView struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Token  uint64 `json:"token"`
	Held   bool   `json:"held"`
}

// get returns the open session, opening one if there is none.
func (ss *sessions) get(ctx context.Context) (*session, error) {
	for {
		if ss.c.isClosed() {
			return nil, ErrClosed
		}
		ss.mu.Lock()
		if s := ss.cur; s != nil && !s.isEnded() {
			ss.mu.Unlock()
			return s, nil
		}
		if ch := ss.opening; ch != nil {
			ss.mu.Unlock()
			select {
			case <-ch:
				ss.mu.Lock()
				err := ss.openErr
				ss.mu.Unlock()
				if err != nil {
					return nil, err
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		ss.opening = ch
		ss.mu.Unlock()

		s, err := ss.open(ctx)
		ss.mu.Lock()
		ss.opening = nil
		ss.openErr = err
		if err == nil {
			ss.cur = s
		}
		close(ch)
		ss.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if ss.c.isClosed() {
			// Closed while opening: give it back.
			s.end("the client closed", true)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ss.c.requestTimeout)
			_ = s.delete(ctx)
			cancel()
			return nil, ErrClosed
		}
		ss.c.goBg(s.keepalive)
		return s, nil
	}
}

func (ss *sessions) open(ctx context.Context) (*session, error) {
	var view sessionView
	sent := time.Now()
	// A session opened twice (an unknown outcome repeated) only expires
	// unused: opening is safe to repeat.
	_, err := ss.c.do(ctx, call{method: "POST", path: "/v1/sessions",
		body: map[string]any{"ttl_ms": ss.c.ttl.Milliseconds()}, out: &view, retry: retryUnknown})
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(view.TTLms) * time.Millisecond
	if ttl <= 0 {
		ttl = ss.c.ttl
	}
	ss.c.log.Debug("bakery: session opened", "session", view.ID, "ttl", ttl)
	return &session{
		c: ss.c, id: view.ID, ttl: ttl,
		grants:   map[grantKey]*Grant{},
		inflight: map[nameKey]int{},
		pending:  map[nameKey]bool{},
		lastOK:   sent,
		done:     make(chan struct{}),
	}, nil
}

// close ends the current session on the server and locally.
func (ss *sessions) close(ctx context.Context) error {
	ss.mu.Lock()
	s := ss.cur
	ss.cur = nil
	ss.mu.Unlock()
	if s == nil || s.isEnded() {
		return nil
	}
	err := s.delete(ctx)
	s.end("the client closed", true)
	if errors.Is(err, ErrNotFound) {
		return nil // it had ended already
	}
	return err
}

func (s *session) delete(ctx context.Context) error {
	// Closing is safe to repeat: a second close finds no session.
	_, err := s.c.do(ctx, call{method: "DELETE", path: "/v1/sessions/" + escape(s.id), retry: retryUnknown, closing: true})
	return err
}

func (s *session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// end marks the session ended: every grant it held is lost (why says why;
// quiet logs it at debug level rather than as a warning).
func (s *session) end(why string, quiet bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	close(s.done)
	grants := s.grants
	s.grants = map[grantKey]*Grant{}
	s.mu.Unlock()
	for _, g := range grants {
		g.lose(why, quiet)
	}
}

// register keeps g in the session; if the session ended meanwhile, g is
// lost at once.
func (s *session) register(g *Grant) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		g.lose("its session had ended", false)
		return
	}
	s.grants[grantKey{g.family, g.name, g.token}] = g
	s.mu.Unlock()
}

func (s *session) unregister(g *Grant) {
	s.mu.Lock()
	delete(s.grants, grantKey{g.family, g.name, g.token})
	s.mu.Unlock()
}

// begin and finish bracket an acquire of k (finish comes after the grant,
// if any, is registered). The last acquire of k to finish runs the
// clean-up of k that waited for it.
func (s *session) begin(k nameKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[k]++
}

func (s *session) finish(k nameKey) {
	s.mu.Lock()
	s.inflight[k]--
	run := false
	if s.inflight[k] <= 0 {
		delete(s.inflight, k)
		run = s.pending[k] && !s.ended
		delete(s.pending, k)
	}
	s.mu.Unlock()
	if run {
		s.cleanUp(k)
	}
}

// keepalive keeps the session alive every TTL/3 until it ends or the
// client closes. A grant the server answers `held: false` for is lost; a
// `404 not_found` answer, or no successful keepalive for a whole TTL,
// ends the session (every grant lost). Each keepalive, retries included,
// is bounded by TTL/3, and the TTL deadline is a timer of its own, which
// fires whatever request is in flight.
func (s *session) keepalive(bg context.Context) {
	every := s.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	// expire fires a TTL after the last successful keepalive was sent: the
	// server may end the session from then on, so its grants are no longer
	// trusted.
	s.mu.Lock()
	expire := time.AfterFunc(time.Until(s.lastOK.Add(s.ttl)), s.expireIfLate)
	s.mu.Unlock()
	defer expire.Stop()
	for {
		select {
		case <-bg.Done():
			return
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(bg, every)
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		var view sessionView
		sent := time.Now()
		_, err := s.c.do(ctx, call{method: "POST", path: "/v1/sessions/" + escape(s.id) + "/keepalive",
			out: &view, retry: retryUnknown})
		cancel()
		if bg.Err() != nil || s.isEnded() {
			return
		}
		switch {
		case err == nil:
			s.mu.Lock()
			if sent.After(s.lastOK) {
				s.lastOK = sent
			}
			if !s.ended {
				expire.Reset(time.Until(s.lastOK.Add(s.ttl)))
			}
			var lost []*Grant
			for _, gv := range view.Grants {
				if gv.Held {
					continue
				}
				k := grantKey{gv.Family, gv.Name, gv.Token}
				if g, ok := s.grants[k]; ok {
					delete(s.grants, k)
					lost = append(lost, g)
				}
			}
			s.mu.Unlock()
			for _, g := range lost {
				g.lose("the server answered held=false", false)
			}
		case errors.Is(err, ErrNotFound):
			s.endAndForget("its session ended on the server")
			return
		default:
			s.c.log.Warn("bakery: keepalive failed", "session", s.id, "error", err)
		}
	}
}

// expireIfLate ends the session if no keepalive got through for a whole
// TTL: the server has (or may have) ended it. Its grants are no longer
// trusted, and it is closed in case it still lives.
func (s *session) expireIfLate() {
	s.mu.Lock()
	late := !s.ended && time.Since(s.lastOK) >= s.ttl
	s.mu.Unlock()
	if !late {
		return // a keepalive got through meanwhile (and re-armed the timer)
	}
	s.endAndForget("no keepalive got through for a whole TTL")
	s.c.goBg(func(bg context.Context) {
		ctx, cancel := context.WithTimeout(bg, s.c.requestTimeout)
		_ = s.delete(ctx)
		cancel()
	})
}

// endAndForget ends the session and makes the next caller open a new one.
func (s *session) endAndForget(why string) {
	if !s.isEnded() {
		s.c.log.Warn("bakery: session ended", "session", s.id, "why", why)
	}
	s.end(why, false)
	ss := s.c.sess
	ss.mu.Lock()
	if ss.cur == s {
		ss.cur = nil
	}
	ss.mu.Unlock()
}

// cleanUp releases the grants of k the session holds on the server but not
// locally: what an acquire whose outcome is unknown (cancelled, or its
// connection broke) may have taken. While another acquire of k is in
// flight in the client, a grant of k it does not know of could be that
// acquire's, arriving: then the clean-up waits, and runs again when the
// last acquire of k finishes.
func (s *session) cleanUp(k nameKey) {
	s.c.goBg(func(bg context.Context) {
		defer s.c.cleanUps.Add(1)
		ctx, cancel := context.WithTimeout(bg, s.c.requestTimeout)
		defer cancel()
		var view sessionView
		if _, err := s.c.do(ctx, call{method: "GET", path: "/v1/sessions/" + escape(s.id), out: &view, retry: retryUnknown}); err != nil {
			return
		}
		var leaked []uint64
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			return
		}
		if s.inflight[k] > 0 {
			s.pending[k] = true
			s.mu.Unlock()
			return
		}
		for _, gv := range view.Grants {
			if gv.Family != k.family || gv.Name != k.name {
				continue
			}
			if _, known := s.grants[grantKey{gv.Family, gv.Name, gv.Token}]; !known {
				leaked = append(leaked, gv.Token)
			}
		}
		s.mu.Unlock()
		for _, token := range leaked {
			s.c.log.Debug("bakery: releasing a grant an interrupted acquire took", "family", k.family, "name", k.name, "token", token)
			_, _ = s.c.do(ctx, call{method: "POST", path: "/v1/" + k.family + "/" + escape(k.name) + "/release",
				body: releaseBody{Session: s.id, Token: token}, retry: retryRefused})
		}
	})
}

// checkAlive reads the session (`GET /v1/sessions/{id}`) after a call
// answered not_found: if the server no longer knows it, it ended there and
// every grant it held is lost (why says so); if it lives, or the read
// fails, nothing more is done (a keepalive finds out in time). It reports
// whether the session was found gone.
func (s *session) checkAlive(ctx context.Context, why string) bool {
	if s.isEnded() {
		return true
	}
	_, err := s.c.do(ctx, call{method: "GET", path: "/v1/sessions/" + escape(s.id), retry: retryUnknown})
	if KindOf(err) == KindNotFound {
		s.endAndForget(why)
		return true
	}
	return false
}
