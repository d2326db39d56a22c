package bakery_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
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
		f, err := os.OpenFile(os.Getenv("BAKERY_FILE"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		lock := c.Lock(name)
		pid := os.Getpid()
		for i := 0; i < 20; i++ {
			err := lock.Do(ctx, func(ctx context.Context, g *bakery.Grant) error {
				if _, err := fmt.Fprintf(f, "enter %d %d\n", pid, g.Token()); err != nil {
					return err
				}
				time.Sleep(time.Millisecond) // a little work under the lock
				_, err := fmt.Fprintf(f, "exit %d %d\n", pid, g.Token())
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	},
	// hold: take the lock, say so, and wait for it to be lost.
	"hold": func(ctx context.Context, c *bakery.Client, name string) error {
		g, err := c.Lock(name).Acquire(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("acquired %d\n", g.Token())
		select {
		case <-g.Lost():
			fmt.Println("lost")
			return nil
		case <-ctx.Done():
			return fmt.Errorf("never lost: %w", ctx.Err())
		}
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
