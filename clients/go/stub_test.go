package bakery_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// stub is a TCP server speaking just enough HTTP: answer says how to
// answer each request; a request it answers with hang is read and never
// answered (the connection stays open until the stub closes). It counts
// the requests it received by "METHOD path".
type stub struct {
	ln     net.Listener
	answer func(method, path string) (status int, body string, hang bool)

	mu     sync.Mutex
	counts map[string]int
	conns  []net.Conn
	closed chan struct{}
}

func newStub(t *testing.T, answer func(method, path string) (int, string, bool)) *stub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stub{ln: ln, answer: answer, counts: map[string]int{}, closed: make(chan struct{})}
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *stub) url() string { return "http://" + s.ln.Addr().String() }

func (s *stub) serve() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, conn)
		s.mu.Unlock()
		go s.handle(conn)
	}
}

func (s *stub) handle(conn net.Conn) {
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		key := req.Method + " " + req.URL.Path
		s.mu.Lock()
		s.counts[key]++
		s.mu.Unlock()
		status, body, hang := s.answer(req.Method, req.URL.Path)
		if hang {
			<-s.closed
			return
		}
		fmt.Fprintf(conn, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			status, len(body), body)
	}
}

func (s *stub) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[key]
}

func (s *stub) close() {
	select {
	case <-s.closed:
		return
	default:
	}
	close(s.closed)
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

// stubSession answers opening a session and keeping it alive, and grants
// every acquire (token 7), until hang is set: then it answers nothing.
type stubSession struct {
	mu   sync.Mutex
	hang bool
	// other answers the requests stubSession does not know (nil: hang).
	other func(method, path string) (int, string, bool)
}

func (ss *stubSession) setHang() {
	ss.mu.Lock()
	ss.hang = true
	ss.mu.Unlock()
}

func (ss *stubSession) answer(method, path string) (int, string, bool) {
	ss.mu.Lock()
	hang := ss.hang
	ss.mu.Unlock()
	if hang {
		return 0, "", true
	}
	switch {
	case method == "POST" && path == "/v1/sessions":
		return 200, `{"id":"stub-session","ttl_ms":1000,"grants":[]}`, false
	case method == "POST" && strings.HasSuffix(path, "/keepalive"):
		return 200, `{"id":"stub-session","ttl_ms":1000,"grants":[]}`, false
	case method == "POST" && strings.HasSuffix(path, "/acquire"):
		return 200, `{"granted":true,"token":7}`, false
	case method == "DELETE":
		return 204, "", false
	}
	if ss.other != nil {
		return ss.other(method, path)
	}
	return 0, "", true
}

func stubClient(t *testing.T, url string, timeout time.Duration) *bakery.Client {
	t.Helper()
	c, err := bakery.NewClient(url, bakery.WithSessionTTL(time.Second), bakery.WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// A keepalive that is accepted and never answered must not keep a grant
// "held": lost fires by the last successful keepalive + TTL, whatever
// request is in flight.
func TestLostByTTLWhenKeepaliveHangs(t *testing.T) {
	ss := &stubSession{}
	st := newStub(t, ss.answer)
	// A request timeout far above the TTL: only the keepalive's own bound
	// and the TTL timer can let lost fire in time.
	c := stubClient(t, st.url(), 30*time.Second)
	ctx := within(t, 30*time.Second)
	g, err := c.Lock("held").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ss.setHang()
	// The last successful keepalive was sent before this instant.
	hung := time.Now()
	select {
	case <-g.Lost():
	case <-ctx.Done():
		t.Fatal("lost never fired while keepalives hung")
	}
	late := time.Since(hung)
	t.Logf("lost %v after the stub stopped answering (TTL 1s)", late.Round(time.Millisecond))
	if late > time.Second+500*time.Millisecond {
		t.Fatalf("lost fired %v after the stub stopped answering: want at most TTL (1s) + slack", late)
	}
	if !g.IsLost() {
		t.Fatal("IsLost is false after Lost fired")
	}
	if n := st.count("POST /v1/sessions/stub-session/keepalive"); n < 1 {
		t.Fatalf("%d keepalives reached the stub", n)
	}
}

// An acquire that is accepted and never answered ends with unknown_outcome
// and is not resent.
func TestAcquireNeverAnsweredIsUnknownAndNotResent(t *testing.T) {
	ss := &stubSession{}
	st := newStub(t, ss.answer)
	c := stubClient(t, st.url(), time.Second)
	ctx := within(t, 30*time.Second)
	// Open the session first, with a grant of another name.
	if _, err := c.Lock("other").Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	ss.setHang()
	actx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err := c.Lock("hangs").Acquire(actx)
	if !errors.Is(err, bakery.ErrUnknownOutcome) {
		t.Fatalf("acquire against a stub that never answers: %v, want unknown_outcome", err)
	}
	// Give a wrongful resend every chance to show up before counting.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := st.count("POST /v1/locks/hangs/acquire"); n > 1 {
			t.Fatalf("the acquire reached the stub %d times: an unknown outcome was resent", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := st.count("POST /v1/locks/hangs/acquire"); n != 1 {
		t.Fatalf("the acquire reached the stub %d times, want 1", n)
	}
}

// A release answered 503 unavailable is not resent: the server took the
// grant out of the session before failing its store write.
func TestReleaseAnswered503IsNotResent(t *testing.T) {
	ss := &stubSession{other: func(method, path string) (int, string, bool) {
		if strings.HasSuffix(path, "/release") {
			return 503, `{"kind":"unavailable","message":"the store is unavailable"}`, false
		}
		return 0, "", true
	}}
	st := newStub(t, ss.answer)
	c := stubClient(t, st.url(), 5*time.Second)
	ctx := within(t, 30*time.Second)
	g, err := c.Lock("rel").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); !errors.Is(err, bakery.ErrUnavailable) {
		t.Fatalf("release answered 503: %v, want unavailable", err)
	}
	if n := st.count("POST /v1/locks/rel/release"); n != 1 {
		t.Fatalf("the release reached the stub %d times, want 1 (no resend after an answered 503)", n)
	}
}

// A claim of unknown outcome that cannot be reconciled resets the session:
// it is closed on the server (which gives the claim back) and its grants
// are lost; the caller gets unknown_outcome and the claim is not resent.
func TestClaimOfUnknownOutcomeResetsTheSession(t *testing.T) {
	var mu sync.Mutex
	claimHangs := true
	ss := &stubSession{other: func(method, path string) (int, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(path, "/claim") && claimHangs {
			claimHangs = false
			return 0, "", true
		}
		if method == "GET" && strings.HasPrefix(path, "/v1/once/") {
			return 200, `{"status":"in_progress","attempt":1}`, false
		}
		return 0, "", true
	}}
	st := newStub(t, ss.answer)
	c := stubClient(t, st.url(), time.Second)
	ctx := within(t, 30*time.Second)
	g, err := c.Lock("kept").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	ran := false
	_, err = c.Once(octx, "scope", "key", "payload", func(context.Context) (string, error) {
		ran = true
		return "", nil
	})
	if !errors.Is(err, bakery.ErrUnknownOutcome) {
		t.Fatalf("once with a claim never answered: %v, want unknown_outcome", err)
	}
	if ran {
		t.Fatal("the function ran without a claim")
	}
	if !g.IsLost() {
		t.Fatal("the session was not reset: its grant is still held")
	}
	if n := st.count("DELETE /v1/sessions/stub-session"); n != 1 {
		t.Fatalf("the session was closed %d times, want 1", n)
	}
	if n := st.count("POST /v1/once/scope/key/claim"); n != 1 {
		t.Fatalf("the claim reached the stub %d times, want 1", n)
	}
}

// A claim of unknown outcome the key's state shows nobody holds leaves the
// session alone: no claim of ours stands.
func TestClaimOfUnknownOutcomeOnAKeyNobodyHoldsKeepsTheSession(t *testing.T) {
	ss := &stubSession{other: func(method, path string) (int, string, bool) {
		if method == "GET" && strings.HasPrefix(path, "/v1/once/") {
			return 200, `{"status":"completed","result":"done"}`, false
		}
		return 0, "", true // the claim hangs
	}}
	st := newStub(t, ss.answer)
	c := stubClient(t, st.url(), time.Second)
	ctx := within(t, 30*time.Second)
	g, err := c.Lock("kept").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = c.Once(octx, "scope", "key", "payload", func(context.Context) (string, error) { return "", nil })
	if !errors.Is(err, bakery.ErrUnknownOutcome) {
		t.Fatalf("once with a claim never answered: %v, want unknown_outcome", err)
	}
	if n := st.count("GET /v1/once/scope/key"); n != 1 {
		t.Fatalf("the key was read %d times, want 1", n)
	}
	if g.IsLost() {
		t.Fatal("the session was reset although nobody holds the key")
	}
	if n := st.count("DELETE /v1/sessions/stub-session"); n != 0 {
		t.Fatalf("the session was closed %d times, want 0", n)
	}
}

// Complete answered 503 unavailable is not resent: the server took the
// claim out of the session before failing its store write.
func TestCompleteAnswered503IsNotResent(t *testing.T) {
	ss := &stubSession{other: func(method, path string) (int, string, bool) {
		switch {
		case strings.HasSuffix(path, "/claim"):
			return 200, `{"status":"claimed","attempt":1}`, false
		case strings.HasSuffix(path, "/complete"):
			return 503, `{"kind":"unavailable","message":"the store is unavailable"}`, false
		}
		return 0, "", true
	}}
	st := newStub(t, ss.answer)
	c := stubClient(t, st.url(), 5*time.Second)
	ctx := within(t, 30*time.Second)
	_, err := c.Once(ctx, "scope", "key", "payload", func(context.Context) (string, error) { return "r", nil })
	if !errors.Is(err, bakery.ErrUnavailable) {
		t.Fatalf("complete answered 503: %v, want unavailable", err)
	}
	if n := st.count("POST /v1/once/scope/key/complete"); n != 1 {
		t.Fatalf("complete reached the stub %d times, want 1 (no resend after an answered 503)", n)
	}
}
