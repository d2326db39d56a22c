package bakery_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// raw makes one call to the test server behind the client's back.
func raw(t *testing.T, ctx context.Context, method, path, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, serverURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A release answered 404 because the grant is no longer in the session
// (here: released behind the client's back) loses that grant only: the
// session lives, and the client's other grants are still held.
func TestReleaseNotFoundWithSessionAliveLosesOnlyThatGrant(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	g1, err := c.Lock(unique("gone")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := c.Lock(unique("kept")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"session":%q,"token":%d}`, bakery.SessionIDOf(g1), g1.Token())
	if st := raw(t, ctx, "POST", "/v1/locks/"+g1.Name()+"/release", body); st != 200 && st != 204 {
		t.Fatalf("releasing behind the client's back: %d", st)
	}
	if err := g1.Release(ctx); !errors.Is(err, bakery.ErrNotFound) {
		t.Fatalf("release of a grant not in the session: %v, want not_found", err)
	}
	if !g1.IsLost() {
		t.Fatal("the grant not found is not reported lost")
	}
	if g2.IsLost() {
		t.Fatal("another grant of the live session was reported lost")
	}
	g3, err := c.Lock(unique("third")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bakery.SessionIDOf(g3) != bakery.SessionIDOf(g2) {
		t.Fatal("a new session was opened although the old one lives")
	}
	if err := g2.Release(ctx); err != nil {
		t.Fatalf("release of a grant still held: %v", err)
	}
	if err := g3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release answered 404 because the whole session is gone loses every
// grant of it, and the next acquire opens a new session.
func TestReleaseNotFoundWithSessionGoneLosesEveryGrant(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	g1, err := c.Lock(unique("a")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := c.Lock(unique("b")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := bakery.SessionIDOf(g1)
	if st := raw(t, ctx, "DELETE", "/v1/sessions/"+old, ""); st != 200 && st != 204 {
		t.Fatalf("closing the session behind the client's back: %d", st)
	}
	if err := g1.Release(ctx); !errors.Is(err, bakery.ErrNotFound) {
		t.Fatalf("release in a closed session: %v, want not_found", err)
	}
	select {
	case <-g2.Lost():
	case <-ctx.Done():
		t.Fatal("the other grant of a session found gone did not fire lost")
	}
	g3, err := c.Lock(unique("c")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bakery.SessionIDOf(g3) == old {
		t.Fatal("the next acquire used the session found gone")
	}
	if err := g3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
