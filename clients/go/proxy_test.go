package bakery_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// proxy forwards TCP connections to the test server. Armed, it acts on
// the next answer to an acquire: "drop" closes the connection instead of
// passing the answer on (the grant is taken, its answer lost); "hold"
// passes it on only once unhold is called.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	armed  string
	held   chan struct{}
	conns  []net.Conn
	closed bool
}

func newProxy(t *testing.T) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(serverURL, "http://"), held: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) arm(what string) {
	p.mu.Lock()
	p.armed = what
	p.mu.Unlock()
}

func (p *proxy) unhold() { close(p.held) }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

func (p *proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			return
		}
		go p.pipe(client, server)
	}
}

func (p *proxy) pipe(client, server net.Conn) {
	var mu sync.Mutex
	last := "" // the request line of the last request sent on the connection
	go func() {
		defer server.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if i := bytes.Index(buf[:n], []byte(" HTTP/1.1\r\n")); i > 0 {
					mu.Lock()
					last = string(buf[:i])
					mu.Unlock()
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			mu.Lock()
			req := last
			mu.Unlock()
			act := ""
			p.mu.Lock()
			if p.armed != "" && strings.HasSuffix(req, "/acquire") {
				act, p.armed = p.armed, ""
			}
			p.mu.Unlock()
			switch act {
			case "drop":
				server.Close()
				return
			case "hold":
				<-p.held
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// An acquire granted on the server whose answer is lost ends with
// unknown_outcome, and the client gives the grant back (it reads its
// session and releases the grant it does not know of).
func TestAcquireWhoseAnswerIsLostIsGivenBack(t *testing.T) {
	p := newProxy(t)
	c := newClient(t)
	cp, err := bakery.NewClient(p.url())
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close(context.Background())
	ctx := within(t, 30*time.Second)
	name := unique("lost-answer")
	p.arm("drop")
	if _, err := cp.Lock(name).Acquire(ctx); !errors.Is(err, bakery.ErrUnknownOutcome) {
		t.Fatalf("acquire whose answer was dropped: %v, want unknown_outcome", err)
	}
	// Granted on the server; given back by the clean-up, not by Close.
	waitFor(t, 10*time.Second, func() bool {
		st, err := c.Lock(name).State(ctx)
		return err == nil && len(st.Holders) == 0
	})
}

// The clean-up after an acquire of unknown outcome never releases a grant
// another acquire of the same name in the same client (through another
// Lock object) is receiving: it waits for that acquire to finish, then
// finds the grant known.
func TestCleanUpSparesAGrantAnotherLockObjectIsReceiving(t *testing.T) {
	p := newProxy(t)
	c := newClient(t)
	cp, err := bakery.NewClient(p.url())
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close(context.Background())
	ctx := within(t, 30*time.Second)
	name := unique("spared")
	queue := func(n int) func() bool {
		return func() bool {
			st, err := c.Lock(name).State(ctx)
			return err == nil && len(st.Queue) == n
		}
	}
	g0, err := c.Lock(name).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   *bakery.Grant
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		g, err := cp.Lock(name).Acquire(ctx)
		aDone <- result{g, err}
	}()
	waitFor(t, 10*time.Second, queue(1))
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	bDone := make(chan error, 1)
	go func() {
		_, err := cp.Lock(name).Acquire(bctx)
		bDone <- err
	}()
	waitFor(t, 10*time.Second, queue(2))

	// A is granted on the server; its answer is held on the way.
	p.arm("hold")
	if err := g0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		st, err := c.Lock(name).State(ctx)
		return err == nil && len(st.Holders) == 1 && *st.Holders[0].Token > g0.Token()
	})
	// B is cancelled mid-poll: its clean-up finds A's grant in the session,
	// unknown to the client, with A in flight: it must wait.
	before := bakery.CleanUpsDone(cp)
	cancelB()
	if err := <-bDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v, want context.Canceled", err)
	}
	waitFor(t, 10*time.Second, func() bool { return bakery.CleanUpsDone(cp) > before })
	p.unhold()
	a := <-aDone
	if a.err != nil {
		t.Fatalf("acquire A: %v", a.err)
	}
	// The deferred clean-up runs once A finished, and finds A's grant known.
	waitFor(t, 10*time.Second, func() bool { return bakery.CleanUpsDone(cp) > before+1 })
	if a.g.IsLost() {
		t.Fatal("A's grant was lost")
	}
	st, err := c.Lock(name).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || *st.Holders[0].Token != a.g.Token() {
		t.Fatalf("holders %+v, want A's grant (token %d) still held", st.Holders, a.g.Token())
	}
	if err := a.g.Release(ctx); err != nil {
		t.Fatalf("release of A's grant: %v (the clean-up released it?)", err)
	}
}
