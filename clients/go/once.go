package bakery

import (
	"context"
	"fmt"
	"time"
)

// onceWait is how long one claim waits while another worker runs the key.
const onceWait = 30 * time.Second

type onceState struct {
	Status  string  `json:"status"`
	Attempt *uint64 `json:"attempt"`
	Result  *string `json:"result"`
	Error   *string `json:"error"`
}

type claimBody struct {
	Session string `json:"session"`
	Payload string `json:"payload"`
	WaitMs  int64  `json:"wait_ms"`
}

type finishBody struct {
	Session string `json:"session"`
	Attempt uint64 `json:"attempt"`
	Outcome string `json:"outcome"`
}

// Once runs fn exactly once for key of scope across every process: it
// claims the key (`POST /v1/once/{scope}/{key}/claim`); if claimed, runs fn
// and completes the key with fn's result, which it returns. If the key was
// completed before, it returns the stored result without running fn; if
// another worker runs it now, it waits and claims again, until ctx ends.
//
// If fn fails, the key is failed with fn's error message (the next claim
// runs it again) and Once returns a *FuncError wrapping fn's error; if fn
// panics, the key is failed and the panic goes on. fn's context is
// cancelled if the client's session ends (the claim is given up). payload
// is the request the key names: the same key with another payload is
// refused with [KindConflict].
func (c *Client) Once(ctx context.Context, scope, key, payload string, fn func(ctx context.Context) (string, error)) (string, error) {
	base := "/v1/once/" + escape(scope) + "/" + escape(key)
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("bakery: once %s/%s: %w", scope, key, err)
		}
		s, err := c.sess.get(ctx)
		if err != nil {
			return "", err
		}
		wait := onceWait
		if dl, ok := ctx.Deadline(); ok {
			if rem := time.Until(dl) / 2; rem < wait {
				wait = rem
			}
		}
		var st onceState
		_, err = c.do(ctx, call{method: "POST", path: base + "/claim",
			body: claimBody{Session: s.id, Payload: payload, WaitMs: max(wait.Milliseconds(), 0)},
			out:  &st, retry: retryUnavailable, wait: wait})
		if err != nil {
			switch KindOf(err) {
			case KindNotFound:
				s.endAndForget("a claim answered not_found") // open a new one
				continue
			case KindUnknownOutcome:
				// The claim may have been taken by this session, with
				// nobody to run, complete or fail it.
				c.settleUnknownClaim(ctx, s, base)
			}
			return "", err
		}
		switch st.Status {
		case "completed":
			if st.Result == nil {
				return "", nil
			}
			return *st.Result, nil
		case "in_progress", "released":
			continue
		case "failed":
			e := &OnceFailedError{}
			if st.Attempt != nil {
				e.Attempt = *st.Attempt
			}
			if st.Error != nil {
				e.Message = *st.Error
			}
			return "", e
		case "claimed":
			if st.Attempt == nil {
				return "", &Error{Kind: KindInternal, Op: "POST " + base + "/claim", Message: "claimed without an attempt"}
			}
			return c.runClaimed(ctx, s, base, *st.Attempt, fn)
		default:
			return "", &Error{Kind: KindInternal, Op: "POST " + base + "/claim", Message: "unknown status " + st.Status}
		}
	}
}

func (c *Client) runClaimed(ctx context.Context, s *session, base string, attempt uint64, fn func(ctx context.Context) (string, error)) (result string, err error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-fctx.Done():
		}
	}()
	finish := func(what, outcome string) (onceState, error) {
		var st onceState
		fin, fcancel := context.WithTimeout(context.WithoutCancel(ctx), c.requestTimeout)
		defer fcancel()
		_, err := c.do(fin, call{method: "POST", path: base + "/" + what,
			body: finishBody{Session: s.id, Attempt: attempt, Outcome: outcome},
			out:  &st, retry: retryRefused})
		return st, err
	}
	panicked := true
	defer func() {
		if panicked {
			_, _ = finish("fail", "the function panicked")
		}
	}()
	res, ferr := fn(fctx)
	panicked = false
	if ferr != nil {
		_, failErr := finish("fail", ferr.Error())
		return "", &FuncError{Err: ferr, FailErr: failErr}
	}
	st, err := finish("complete", res)
	if err != nil {
		return "", err
	}
	if st.Result != nil {
		return *st.Result, nil
	}
	return res, nil
}

// settleUnknownClaim ends this session's ownership of a claim whose outcome
// is unknown. The session's view does not list claims, so the key is read:
// if nobody holds it (completed, failed, released, no record), no claim of
// ours stands; otherwise (it is held, perhaps by us, or it cannot be read)
// the session is reset: closed on the server, which gives every claim and
// grant of it back, and ended here (every grant lost). The next call opens
// a new session.
func (c *Client) settleUnknownClaim(ctx context.Context, s *session, base string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.requestTimeout)
	defer cancel()
	var st onceState
	_, err := c.do(rctx, call{method: "GET", path: base, out: &st, retry: retryUnknown})
	switch {
	case KindOf(err) == KindNotFound:
		return
	case err == nil && (st.Status == "completed" || st.Status == "failed" || st.Status == "released"):
		return
	}
	c.log.Warn("bakery: resetting the session after a claim of unknown outcome", "session", s.id, "key", base)
	s.endAndForget("a claim of unknown outcome reset the session")
	if derr := s.delete(rctx); derr != nil && KindOf(derr) != KindNotFound {
		c.log.Warn("bakery: closing the session failed (it ends with its TTL)", "session", s.id, "error", derr)
	}
}
