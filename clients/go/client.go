package bakery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client talks to one `bakery serve` instance. It keeps one HTTP connection
// pool and, once something needs one, one session kept alive in the
// background. A Client is safe for concurrent use. Close it when done: that
// closes its session, which releases every grant it holds.
type Client struct {
	base           string
	token          string
	http           *http.Client
	log            *slog.Logger
	ttl            time.Duration
	requestTimeout time.Duration

	sess *sessions

	closeOnce sync.Once
	closed    chan struct{}
	// bg is the context of background work (prefetches, keepalives).
	bg        context.Context
	bgCancel  context.CancelFunc
	bgMu      sync.Mutex
	bgStopped bool
	wg        sync.WaitGroup

	// cleanUps counts the clean-ups after acquires of unknown outcome that
	// ran to their end (for tests).
	cleanUps atomic.Int64
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends `Authorization: Bearer token` with every call (for a
// service started with a tokens file).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc for every call instead of the client's own.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithLogger logs the client's background events (keepalives, lost grants,
// prefetch failures) to l. The default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithSessionTTL sets the TTL of the client's session (1s to 1h; default
// 10s). The session is kept alive every TTL/3; a grant is lost when its
// session misses its TTL.
func WithSessionTTL(ttl time.Duration) Option { return func(c *Client) { c.ttl = ttl } }

// WithRequestTimeout sets the deadline of each call (default 10s), retries
// included. An acquire's long poll gets its wait on top of it.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// NewClient returns a client of the service at baseURL (e.g.
// "http://127.0.0.1:7878"). It does no I/O.
func NewClient(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Kind: KindInvalidInput, Message: fmt.Sprintf("base URL %q: want http(s)://host:port", baseURL)}
	}
	c := &Client{
		base:           strings.TrimRight(baseURL, "/"),
		ttl:            10 * time.Second,
		requestTimeout: 10 * time.Second,
		closed:         make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	if c.ttl < time.Second || c.ttl > time.Hour {
		return nil, &Error{Kind: KindInvalidInput, Message: fmt.Sprintf("session TTL %v: want 1s to 1h", c.ttl)}
	}
	if c.requestTimeout <= 0 {
		return nil, &Error{Kind: KindInvalidInput, Message: "request timeout must be positive"}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 256
		tr.MaxIdleConnsPerHost = 256
		c.http = &http.Client{Transport: tr}
	}
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	c.sess = newSessions(c)
	return c, nil
}

// Close closes the client's session (`DELETE /v1/sessions/{id}`), which
// releases every grant and gives up every claim it holds, and stops the
// background work. Grants still held fire their Lost channel. Calls made
// after Close fail with [ErrClosed]. Close is idempotent; only the first
// call does the work.
func (c *Client) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = c.sess.close(ctx)
		c.bgMu.Lock()
		c.bgStopped = true
		c.bgMu.Unlock()
		c.bgCancel()
		c.wg.Wait()
		if t, ok := c.http.Transport.(*http.Transport); ok {
			t.CloseIdleConnections()
		}
	})
	return err
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// goBg runs f in the background; its context ends when the client closes.
// It reports false (and does not run f) once the client has closed.
func (c *Client) goBg(f func(ctx context.Context)) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgStopped {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(c.bg)
	}()
	return true
}

// retry says which failures a call may be retried after.
type retry int

const (
	// retryUnavailable: only failures where nothing was done (503
	// unavailable, connection refused).
	retryUnavailable retry = iota
	// retryRefused: only a refused connection (nothing was sent). For
	// release, complete and fail: the server takes the grant or claim out
	// of the session before its store write, so after an answered 503 a
	// resend would only find it gone.
	retryRefused
	// retryUnknown: also an unknown outcome (the call may be repeated
	// safely: a read, a keepalive, a block reservation).
	retryUnknown
)

type call struct {
	method string
	path   string // escaped
	body   any    // JSON-encoded if not nil
	out    any    // JSON-decoded from a 200 if not nil
	retry  retry
	// wait is added to the request timeout (a long poll's wait).
	wait time.Duration
	// closing: made while the client closes (allowed after Close began).
	closing bool
}

// escape escapes one path segment.
func escape(s string) string { return url.PathEscape(s) }

// do makes call c, retrying per its retry rule until the call's deadline.
// It returns the HTTP status of the answer.
func (c *Client) do(ctx context.Context, cl call) (int, error) {
	if !cl.closing && c.isClosed() {
		return 0, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout+cl.wait)
	defer cancel()
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return 0, &Error{Kind: KindInvalidInput, Op: cl.method + " " + cl.path, Message: err.Error()}
		}
	}
	backoff := 50 * time.Millisecond
	for {
		status, retryAfter, err := c.once(ctx, cl, body)
		if err == nil {
			return status, nil
		}
		k := KindOf(err)
		var again bool
		switch cl.retry {
		case retryRefused:
			again = k == KindUnavailable && status == 0
		case retryUnknown:
			again = k == KindUnavailable || k == KindUnknownOutcome
		default:
			again = k == KindUnavailable
		}
		if !again || ctx.Err() != nil {
			return status, err
		}
		pause := backoff
		if retryAfter > pause {
			pause = retryAfter
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < pause {
			return status, err
		}
		c.log.Debug("bakery: retrying", "op", cl.method+" "+cl.path, "after", pause, "error", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, err
		case <-t.C:
		}
		if backoff *= 2; backoff > time.Second {
			backoff = time.Second
		}
	}
}

type errorBody struct {
	Kind    Kind   `json:"kind"`
	Message string `json:"message"`
}

// once makes one attempt of cl.
func (c *Client) once(ctx context.Context, cl call, body []byte) (int, time.Duration, error) {
	op := cl.method + " " + cl.path
	if err := ctx.Err(); err != nil {
		// Ended before sending: nothing was done.
		return 0, 0, &Error{Kind: KindUnavailable, Op: op, Message: err.Error(), Err: err}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.base+cl.path, rd)
	if err != nil {
		return 0, 0, &Error{Kind: KindInvalidInput, Op: op, Message: err.Error(), Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, 0, transportError(ctx, op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, 0, transportError(ctx, op, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if cl.out != nil && len(data) > 0 {
			if err := json.Unmarshal(data, cl.out); err != nil {
				return resp.StatusCode, 0, &Error{Kind: KindInternal, Status: resp.StatusCode, Op: op,
					Message: "undecodable answer: " + err.Error(), Err: err}
			}
		}
		return resp.StatusCode, 0, nil
	}
	return resp.StatusCode, retryAfter(resp), statusError(op, resp.StatusCode, data)
}

func retryAfter(resp *http.Response) time.Duration {
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
	}
	return 0
}

func statusError(op string, status int, data []byte) error {
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Kind == "" {
		// Not the service's error body (a proxy's?): guess from the status.
		k := KindInternal
		switch {
		case status == 400:
			k = KindInvalidInput
		case status == 401:
			k = KindUnauthorized
		case status == 403:
			k = KindForbidden
		case status == 404:
			k = KindNotFound
		case status == 409:
			k = KindConflict
		case status == 502 || status == 504:
			k = KindUnknownOutcome
		case status == 503:
			k = KindUnavailable
		}
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &Error{Kind: k, Status: status, Op: op, Message: msg}
	}
	return &Error{Kind: eb.Kind, Status: status, Op: op, Message: eb.Message}
}

// transportError classifies a failed round trip: unavailable when the
// request never reached the server, unknown_outcome when it may have. A
// context's end is returned as the context's error (wrapped), with the kind
// the failure would have had.
func transportError(ctx context.Context, op string, err error) error {
	kind := KindUnknownOutcome
	var op2 *net.OpError
	if errors.As(err, &op2) && op2.Op == "dial" {
		kind = KindUnavailable
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		kind = KindUnavailable
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &Error{Kind: kind, Op: op, Message: ctxErr.Error(), Err: ctxErr}
	}
	return &Error{Kind: kind, Op: op, Message: err.Error(), Err: err}
}
