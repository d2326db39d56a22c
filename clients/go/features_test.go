package bakery_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

func TestSequenceIncreasingAcrossBlocks(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	seq, err := c.Sequence(unique("seq"), bakery.SequenceOptions{Block: 10})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 1000; i++ {
		id, err := seq.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && id <= last {
			t.Fatalf("id %d after %d", id, last)
		}
		last = id
	}
}

func TestSequenceSharedByGoroutinesAndObjects(t *testing.T) {
	c1, c2 := newClient(t), newClient(t)
	ctx := within(t, 30*time.Second)
	name := unique("seq")
	var seqs []*bakery.Sequence
	for _, c := range []*bakery.Client{c1, c1, c2} {
		s, err := c.Sequence(name, bakery.SequenceOptions{Block: 50})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(seq *bakery.Sequence) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				id, err := seq.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[id] {
					mu.Unlock()
					errs <- fmt.Errorf("id %d handed out twice", id)
					return
				}
				seen[id] = true
				mu.Unlock()
			}
		}(seqs[g%3])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != 6000 {
		t.Fatalf("%d ids, want 6000", len(seen))
	}
}

func TestSequenceBadNameIsInvalidInput(t *testing.T) {
	c := newClient(t)
	seq, err := c.Sequence("bad name/with space", bakery.SequenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = seq.Next(within(t, 10*time.Second))
	if !errors.Is(err, bakery.ErrInvalidInput) {
		t.Fatalf("got %v, want invalid_input", err)
	}
	var e *bakery.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Message == "" {
		t.Fatalf("got %#v, want a 400 with a message", e)
	}
}

func TestLockTryAcquireAndFencing(t *testing.T) {
	c1, c2 := newClient(t), newClient(t)
	ctx := within(t, 30*time.Second)
	name := unique("lock")
	g1, err := c1.Lock(name).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok, err := c2.Lock(name).TryAcquire(ctx); err != nil || ok || g != nil {
		t.Fatalf("try of a held lock: %v %v %v, want busy", g, ok, err)
	}
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g2, ok, err := c2.Lock(name).TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("try of a free lock: %v %v", ok, err)
	}
	if g2.Token() <= g1.Token() {
		t.Fatalf("token %d after %d: fencing tokens must increase", g2.Token(), g1.Token())
	}
	st, err := c1.Lock(name).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Token == nil || *st.Holders[0].Token != g2.Token() {
		t.Fatalf("state %+v, want one holder with token %d", st, g2.Token())
	}
	if err := g2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if g2.IsLost() {
		t.Fatal("a released grant fired lost")
	}
}

func TestLockWaiterServedOnRelease(t *testing.T) {
	c1, c2 := newClient(t), newClient(t)
	ctx := within(t, 30*time.Second)
	name := unique("lock")
	g1, err := c1.Lock(name).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	got := make(chan error, 1)
	go func() {
		g, err := c2.Lock(name).Acquire(ctx)
		if err == nil && !released.Load() {
			err = errors.New("granted while the first holder held it")
		}
		if err == nil {
			err = g.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, func() bool {
		st, err := c1.Lock(name).State(ctx)
		return err == nil && len(st.Queue) == 1
	})
	released.Store(true)
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestAcquireTimesOutWithContext(t *testing.T) {
	c1, c2 := newClient(t), newClient(t)
	name := unique("lock")
	g, err := c1.Lock(name).Acquire(within(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err = c2.Lock(name).Acquire(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	// The timed-out waiter leaves the queue: at once when the deadline fell
	// between two polls, else when the server ends the poll the deadline
	// cut short (its timeout_ms ends before the caller's deadline would).
	waitFor(t, 10*time.Second, func() bool {
		st, err := c1.Lock(name).State(within(t, 10*time.Second))
		return err == nil && len(st.Queue) == 0
	})
	_ = g
}

func TestCancelledAcquireLeavesQueue(t *testing.T) {
	c1, c2 := newClient(t), newClient(t)
	ctx := within(t, 30*time.Second)
	name := unique("lock")
	g, err := c1.Lock(name).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c2.Lock(name).Acquire(wctx)
		done <- err
	}()
	waitFor(t, 10*time.Second, func() bool {
		st, err := c1.Lock(name).State(ctx)
		return err == nil && len(st.Queue) == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v, want context.Canceled", err)
	}
	waitFor(t, 10*time.Second, func() bool {
		st, err := c1.Lock(name).State(ctx)
		return err == nil && len(st.Queue) == 0
	})
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphorePermits(t *testing.T) {
	ctx := within(t, 30*time.Second)
	name := unique("sem")
	c1, c2, c3 := newClient(t), newClient(t), newClient(t)
	g1, err := c1.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := c2.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c3.Semaphore(name, 2).TryAcquire(ctx); err != nil || ok {
		t.Fatalf("third permit of 2: ok=%v err=%v, want busy", ok, err)
	}
	if err := g1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g3, ok, err := c3.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("a freed permit: ok=%v err=%v", ok, err)
	}
	// Another number of permits than the semaphore was made with: a conflict.
	if _, _, err := c3.Semaphore(name, 5).TryAcquire(ctx); !errors.Is(err, bakery.ErrConflict) {
		t.Fatalf("5 permits of a 2-permit semaphore: err=%v, want conflict", err)
	}
	st, err := c3.Semaphore(name, 2).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 2 || st.Permits == nil || *st.Permits != 2 {
		t.Fatalf("state %+v, want 2 holders of 2 permits", st)
	}
	for _, g := range []*bakery.Grant{g2, g3} {
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRWLockReadersShareWriterExcludes(t *testing.T) {
	ctx := within(t, 30*time.Second)
	name := unique("rw")
	c1, c2, c3 := newClient(t), newClient(t), newClient(t)
	r1, err := c1.RWLock(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, ok, err := c2.RWLock(name).TryAcquire(ctx, bakery.Read)
	if err != nil || !ok {
		t.Fatalf("a second reader: ok=%v err=%v, want shared", ok, err)
	}
	if _, ok, err := c3.RWLock(name).TryAcquire(ctx, bakery.Write); err != nil || ok {
		t.Fatalf("a writer among readers: ok=%v err=%v, want busy", ok, err)
	}
	for _, g := range []*bakery.Grant{r1, r2} {
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c3.RWLock(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c1.RWLock(name).TryAcquire(ctx, bakery.Read); err != nil || ok {
		t.Fatalf("a reader under a writer: ok=%v err=%v, want busy", ok, err)
	}
	if _, ok, err := c2.RWLock(name).TryAcquire(ctx, bakery.Write); err != nil || ok {
		t.Fatalf("a second writer: ok=%v err=%v, want busy", ok, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestElectionLeaderAndObserve(t *testing.T) {
	ctx := within(t, 30*time.Second)
	name := unique("election")
	c0, c1, c2 := newClient(t), newClient(t), newClient(t)
	events, err := c0.Election(name).Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() bakery.LeaderEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the observe channel closed")
			}
			return ev
		case <-ctx.Done():
			t.Fatal("no leader event")
		}
		return bakery.LeaderEvent{}
	}
	if ev := next(); ev.Term != 0 || ev.Owner != nil {
		t.Fatalf("first event %+v, want nobody", ev)
	}
	e1 := c1.Election(name)
	g1, err := e1.Campaign(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	ev := next()
	if ev.Term != g1.Token() || ev.Value == nil || *ev.Value != "alpha" {
		t.Fatalf("event %+v, want alpha at term %d", ev, g1.Token())
	}
	leader, err := c2.Election(name).Leader(ctx)
	if err != nil || leader.Term != g1.Token() {
		t.Fatalf("leader %+v %v, want term %d", leader, err, g1.Token())
	}
	won := make(chan *bakery.Grant, 1)
	go func() {
		g, err := c2.Election(name).Campaign(ctx, "beta")
		if err != nil {
			t.Error(err)
		}
		won <- g
	}()
	waitFor(t, 10*time.Second, func() bool {
		st, err := c0.Election(name).Leader(ctx)
		return err == nil && st.Term == g1.Token()
	})
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := <-won
	if g2 == nil {
		t.FailNow()
	}
	// Observers may see "nobody" between the two leaders.
	for {
		ev = next()
		if ev.Term != 0 {
			break
		}
	}
	if ev.Term != g2.Token() || ev.Value == nil || *ev.Value != "beta" || g2.Token() <= g1.Token() {
		t.Fatalf("event %+v, want beta at term %d > %d", ev, g2.Token(), g1.Token())
	}
}

func TestOnceCompletedIsNotRunAgain(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	key := unique("key")
	runs := 0
	fn := func(ctx context.Context) (string, error) { runs++; return fmt.Sprintf("done %d", runs), nil }
	for i := 0; i < 3; i++ {
		res, err := c.Once(ctx, "go-tests", key, "p", fn)
		if err != nil {
			t.Fatal(err)
		}
		if res != "done 1" {
			t.Fatalf("call %d got %q, want the stored %q", i, res, "done 1")
		}
	}
	if runs != 1 {
		t.Fatalf("ran %d times", runs)
	}
	// Another payload under the same key is refused.
	_, err := c.Once(ctx, "go-tests", key, "other", fn)
	if !errors.Is(err, bakery.ErrConflict) {
		t.Fatalf("another payload: %v, want conflict", err)
	}
}

func TestOnceFailedRunsAgain(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	key := unique("key")
	boom := errors.New("boom")
	_, err := c.Once(ctx, "go-tests", key, "p", func(context.Context) (string, error) { return "", boom })
	var fe *bakery.FuncError
	if !errors.Is(err, boom) || !errors.As(err, &fe) || fe.FailErr != nil {
		t.Fatalf("got %v, want the function's error", err)
	}
	res, err := c.Once(ctx, "go-tests", key, "p", func(context.Context) (string, error) { return "second", nil })
	if err != nil || res != "second" {
		t.Fatalf("after a failure: %q %v, want it run again", res, err)
	}
}

func TestOnceInProgressWaitsForTheResult(t *testing.T) {
	c1, c2 := newClient(t), newClient(t)
	ctx := within(t, 30*time.Second)
	key := unique("key")
	started, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		res, err := c1.Once(ctx, "go-tests", key, "p", func(context.Context) (string, error) {
			close(started)
			<-finish
			return "from one", nil
		})
		if err == nil && res != "from one" {
			err = fmt.Errorf("got %q", res)
		}
		first <- err
	}()
	<-started
	second := make(chan string, 1)
	go func() {
		res, err := c2.Once(ctx, "go-tests", key, "p", func(context.Context) (string, error) {
			return "from two", nil
		})
		if err != nil {
			t.Error(err)
		}
		second <- res
	}()
	// c2 is in progress until c1 finishes.
	select {
	case res := <-second:
		t.Fatalf("the second caller returned %q while the first ran", res)
	case <-time.After(300 * time.Millisecond):
	}
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if res := <-second; res != "from one" {
		t.Fatalf("second caller got %q, want the first's result", res)
	}
}

func TestErrorsKinds(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 10*time.Second)
	_, err := c.Lock("no spaces allowed").Acquire(ctx)
	if !errors.Is(err, bakery.ErrInvalidInput) || errors.Is(err, bakery.ErrNotFound) {
		t.Fatalf("bad name: %v, want invalid_input", err)
	}
	if bakery.KindOf(err) != bakery.KindInvalidInput {
		t.Fatalf("KindOf: %q", bakery.KindOf(err))
	}
	// A port nobody listens on: connection refused is unavailable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dead, err := bakery.NewClient("http://"+addr, bakery.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close(ctx)
	seq, _ := dead.Sequence("x", bakery.SequenceOptions{})
	_, err = seq.Next(ctx)
	var e *bakery.Error
	if !errors.Is(err, bakery.ErrUnavailable) || !errors.As(err, &e) || e.Status != 0 {
		t.Fatalf("refused: %v, want unavailable without a status", err)
	}
	_, err = dead.Lock("x").Acquire(ctx)
	if !errors.Is(err, bakery.ErrUnavailable) {
		t.Fatalf("refused acquire: %v, want unavailable", err)
	}
	if _, err := bakery.NewClient("not a url"); !errors.Is(err, bakery.ErrInvalidInput) {
		t.Fatalf("bad URL: %v", err)
	}
}

func TestCloseReleasesGrants(t *testing.T) {
	name := unique("lock")
	c1, err := bakery.NewClient(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t)
	ctx := within(t, 30*time.Second)
	g, err := c1.Lock(name).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c2.Lock(name).TryAcquire(ctx); ok {
		t.Fatal("the lock is held: try must fail")
	}
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Lost():
	default:
		t.Fatal("a grant held at Close did not fire lost")
	}
	g2, ok, err := c2.Lock(name).TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("after close: ok=%v err=%v, want the lock free", ok, err)
	}
	if err := g2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Lock(name).Acquire(ctx); !errors.Is(err, bakery.ErrClosed) {
		t.Fatalf("after close: %v, want ErrClosed", err)
	}
}

func TestLockDoAndReleaseTwice(t *testing.T) {
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	name := unique("lock")
	var held *bakery.Grant
	err := c.Lock(name).Do(ctx, func(ctx context.Context, g *bakery.Grant) error {
		held = g
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st, err := c.Lock(name).State(ctx)
		if err != nil {
			return err
		}
		if len(st.Holders) != 1 || !strings.Contains(st.Holders[0].Owner, "session") {
			return fmt.Errorf("state %+v: want us holding it", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("a second release: %v, want nothing", err)
	}
	st, err := c.Lock(name).State(ctx)
	if err != nil || len(st.Holders) != 0 {
		t.Fatalf("after Do: %+v %v, want free", st, err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestObserveEndsWhenClientCloses(t *testing.T) {
	c, err := bakery.NewClient(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := within(t, 30*time.Second)
	events, err := c.Election(unique("election")).Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Term != 0 {
		t.Fatalf("first event %+v, want nobody", ev)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("an event after Close")
		}
	case <-ctx.Done():
		t.Fatal("the observe channel stayed open after Close")
	}
}

func TestLostWhenNoKeepaliveGetsThrough(t *testing.T) {
	// A server of its own, stopped (SIGSTOP) while the client holds a lock:
	// no keepalive gets through for a TTL, so the grant is lost locally.
	srv, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	c, err := bakery.NewClient(srv.url, bakery.WithSessionTTL(time.Second), bakery.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := within(t, 30*time.Second)
	g, err := c.Lock(unique("lock")).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	select {
	case <-g.Lost():
	case <-ctx.Done():
		t.Fatal("lost did not fire while the server was unreachable")
	}
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("lost %v after the server stopped", time.Since(stopped).Round(time.Millisecond))
	if err := g.Release(ctx); !errors.Is(err, bakery.ErrLost) {
		t.Fatalf("release of a lost grant: %v, want lost", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
