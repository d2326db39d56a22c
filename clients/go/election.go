package bakery

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Election elects one leader among its candidates; the leader publishes a
// value that observers see.
type Election struct {
	c    *Client
	name string

	mu     sync.Mutex
	leader *Grant
}

// Election returns the election name. It does no I/O.
func (c *Client) Election(name string) *Election { return &Election{c: c, name: name} }

// Name is the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits until this client leads the election, publishing value,
// or ctx ends. The grant's Token is the leader's term; its Lost fires if
// leadership is lost. Resign (or the grant's Release) steps down.
func (e *Election) Campaign(ctx context.Context, value string) (*Grant, error) {
	v := value
	g, err := e.c.acquire(ctx, familyElections, e.name, acquireBody{Data: &v}, false)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.leader = g
	e.mu.Unlock()
	return g, nil
}

// TryCampaign leads the election only if nobody leads or waits now.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Grant, bool, error) {
	v := value
	g, err := e.c.acquire(ctx, familyElections, e.name, acquireBody{Data: &v}, true)
	if g != nil {
		e.mu.Lock()
		e.leader = g
		e.mu.Unlock()
	}
	return g, g != nil, err
}

// Resign steps down from the leadership the last Campaign won (nothing if
// this Election does not lead).
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	g := e.leader
	e.leader = nil
	e.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.Release(ctx)
}

// LeaderEvent is the leader of an election, or nobody (Term 0, no owner).
type LeaderEvent struct {
	// Term is the leader's term (its grant's fencing token); 0: nobody leads.
	Term uint64 `json:"term"`
	// Owner is the leader's owner ("session ID").
	Owner *string `json:"owner"`
	// Value is the value the leader published.
	Value *string `json:"value"`
}

// Leader reads the leader now.
func (e *Election) Leader(ctx context.Context) (LeaderEvent, error) {
	st, err := e.c.state(ctx, familyElections, e.name)
	if err != nil {
		return LeaderEvent{}, err
	}
	if len(st.Holders) == 0 {
		return LeaderEvent{}, nil
	}
	h := st.Holders[0]
	ev := LeaderEvent{Owner: &h.Owner, Value: h.Data}
	if h.Token != nil {
		ev.Term = *h.Token
	}
	return ev, nil
}

// Observe follows the election: the channel receives the leader now, then
// every change of leader, until ctx ends or the client closes (then it is
// closed). It reconnects when the server ends the stream or the connection breaks
// (sending the leader again after a reconnect). The first connection's
// failure is returned.
func (e *Election) Observe(ctx context.Context) (<-chan LeaderEvent, error) {
	if e.c.isClosed() {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.c.bg, cancel) // the client's Close ends it
	resp, err := e.openStream(ctx)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	ch := make(chan LeaderEvent, 16)
	go func() {
		defer close(ch)
		defer cancel()
		defer stop()
		backoff := 50 * time.Millisecond
		for {
			err := readEvents(ctx, resp, ch)
			resp.Body.Close()
			if ctx.Err() != nil || e.c.isClosed() {
				return
			}
			if err != nil {
				e.c.log.Debug("bakery: observe stream broke; reconnecting", "election", e.name, "error", err)
			}
			for {
				resp, err = e.openStream(ctx)
				if err == nil {
					backoff = 50 * time.Millisecond
					break
				}
				if ctx.Err() != nil || e.c.isClosed() {
					return
				}
				e.c.log.Warn("bakery: observe reconnect failed", "election", e.name, "error", err)
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				if backoff *= 2; backoff > 2*time.Second {
					backoff = 2 * time.Second
				}
			}
		}
	}()
	return ch, nil
}

func (e *Election) openStream(ctx context.Context) (*http.Response, error) {
	c := e.c
	path := "/v1/elections/" + escape(e.name) + "/observe"
	op := "GET " + path
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return nil, &Error{Kind: KindInvalidInput, Op: op, Message: err.Error(), Err: err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(ctx, op, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		return nil, statusError(op, resp.StatusCode, []byte(b.String()))
	}
	return resp, nil
}

// readEvents sends the stream's `leader` events to ch until it ends.
func readEvents(ctx context.Context, resp *http.Response, ch chan<- LeaderEvent) error {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var event string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if event == "leader" && data.Len() > 0 {
				var ev LeaderEvent
				if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
					return err
				}
				select {
				case ch <- ev:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			event = ""
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a keep-alive comment
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
