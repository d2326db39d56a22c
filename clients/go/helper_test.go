package bakery_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// runHelper is the body of a worker process of a multi-process test: the
// test binary re-executed with BAKERY_GO_TEST_HELPER=mode. Its arguments
// come in environment variables; it reports on stdout.
func runHelper(mode string) int {
	url := os.Getenv("BAKERY_URL")
	name := os.Getenv("BAKERY_NAME")
	var opts []bakery.Option
	if ttl := os.Getenv("BAKERY_TTL_MS"); ttl != "" {
		ms, _ := strconv.Atoi(ttl)
		opts = append(opts, bakery.WithSessionTTL(time.Duration(ms)*time.Millisecond))
	}
	c, err := bakery.NewClient(url, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = c.Close(cctx)
	}()
	if err := helpers[mode](ctx, c, name); err != nil {
		fmt.Fprintln(os.Stderr, "helper", mode, "failed:", err)
		return 1
	}
	return 0
}

var helpers = map[string]func(ctx context.Context, c *bakery.Client, name string) error{
	// ids: print 1,000 ids of the sequence, one a line.
	"ids": func(ctx context.Context, c *bakery.Client, name string) error {
		seq, err := c.Sequence(name, bakery.SequenceOptions{Block: 64})
		if err != nil {
			return err
		}
		for i := 0; i < 1000; i++ {
			id, err := seq.Next(ctx)
			if err != nil {
				return err
			}
			fmt.Println(id)
		}
		return nil
	},
	// lock: 20 times, take the lock and append enter/exit lines to
	// BAKERY_FILE while holding it.
	"lock": func(ctx context.Context, c *bakery.Client, name string) error {
		lock := c.Lock(name)
		return criticalSections(func(i int, section func(token uint64) error) error {
			return lock.Do(ctx, func(ctx context.Context, g *bakery.Grant) error {
				return section(g.Token())
			})
		})
	},
	// unguarded: the lock helper's critical section without the lock (the
	// overlap checker's negative control); the token is the clock, so
	// that only an overlap can fail the check.
	"unguarded": func(ctx context.Context, c *bakery.Client, name string) error {
		return criticalSections(func(i int, section func(token uint64) error) error {
			return section(uint64(time.Now().UnixNano()))
		})
	},
	// hold: take the lock, say so, and wait for it to be lost; then print
	// how long after the SIGCONT it received lost fired (in ms; negative
	// if lost fired before the SIGCONT was seen).
	"hold": func(ctx context.Context, c *bakery.Client, name string) error {
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		g, err := c.Lock(name).Acquire(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("acquired %d\n", g.Token())
		var contAt, lostAt time.Time
		for contAt.IsZero() || lostAt.IsZero() {
			select {
			case <-cont:
				if contAt.IsZero() {
					contAt = time.Now()
				}
			case <-g.Lost():
				if lostAt.IsZero() {
					lostAt = time.Now()
				}
			case <-ctx.Done():
				return fmt.Errorf("never lost or continued: %w", ctx.Err())
			}
		}
		fmt.Printf("lost %d\n", lostAt.Sub(contAt).Milliseconds())
		return nil
	},
	// once: run the key once; each run appends a line to BAKERY_FILE.
	"once": func(ctx context.Context, c *bakery.Client, name string) error {
		pid := os.Getpid()
		res, err := c.Once(ctx, "go-tests", name, "payload", func(ctx context.Context) (string, error) {
			f, err := os.OpenFile(os.Getenv("BAKERY_FILE"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return "", err
			}
			defer f.Close()
			if _, err := fmt.Fprintf(f, "ran %d\n", pid); err != nil {
				return "", err
			}
			time.Sleep(200 * time.Millisecond) // let the others find it in progress
			return fmt.Sprintf("result of %d", pid), nil
		})
		if err != nil {
			return err
		}
		fmt.Println(res)
		return nil
	},
}

// criticalSections says "ready" on stdout, waits for a line on stdin (so
// that every process starts at once), then 20 times calls guard with a
// critical section that appends "enter PID TOKEN" to BAKERY_FILE, works
// 3 ms, and appends "exit PID TOKEN".
func criticalSections(guard func(i int, section func(token uint64) error) error) error {
	f, err := os.OpenFile(os.Getenv("BAKERY_FILE"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the start: %w", err)
	}
	pid := os.Getpid()
	for i := 0; i < 20; i++ {
		err := guard(i, func(token uint64) error {
			if _, err := fmt.Fprintf(f, "enter %d %d\n", pid, token); err != nil {
				return err
			}
			time.Sleep(3 * time.Millisecond) // work in the critical section
			_, err := fmt.Fprintf(f, "exit %d %d\n", pid, token)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
