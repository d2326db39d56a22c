// Command bakery-bench measures the Go client against a running `bakery
// serve` and prints one JSON line:
//
//	{"client":"go","ids_per_s":...,"block":100000,"lock_ops_per_s":...,"seconds":...}
//
// ids_per_s is Sequence.Next calls per second in one goroutine, from
// locally reserved blocks (with background prefetch); lock_ops_per_s is
// acquire+release pairs per second on one uncontended lock, sequential.
//
// Environment: BAKERY_URL (required), BAKERY_BENCH_SECONDS (default 2, per
// measurement), BAKERY_BENCH_BLOCK (default 100000).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// result is the JSON line, its fields in the order the bench scripts print.
type result struct {
	Client      string  `json:"client"`
	IdsPerS     float64 `json:"ids_per_s"`
	Block       uint64  `json:"block"`
	LockOpsPerS float64 `json:"lock_ops_per_s"`
	Seconds     float64 `json:"seconds"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bakery-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	url := os.Getenv("BAKERY_URL")
	if url == "" {
		return fmt.Errorf("set BAKERY_URL to a running bakery serve (e.g. http://127.0.0.1:7878)")
	}
	seconds := 2.0
	if s := os.Getenv("BAKERY_BENCH_SECONDS"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("BAKERY_BENCH_SECONDS=%q: want a positive number", s)
		}
		seconds = v
	}
	block := uint64(100_000)
	if s := os.Getenv("BAKERY_BENCH_BLOCK"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v == 0 {
			return fmt.Errorf("BAKERY_BENCH_BLOCK=%q: want a positive integer", s)
		}
		block = v
	}
	dur := time.Duration(seconds * float64(time.Second))
	c, err := bakery.NewClient(url, bakery.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	ctx := context.Background()
	defer c.Close(ctx)
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

	seq, err := c.Sequence("bench-go-"+suffix, bakery.SequenceOptions{Block: block})
	if err != nil {
		return err
	}
	if _, err := seq.Next(ctx); err != nil { // the first block
		return err
	}
	var n uint64
	var last uint64
	start := time.Now()
	deadline := start.Add(dur)
	for {
		// Check the clock every 4096 ids, not every id.
		for i := 0; i < 4096; i++ {
			id, err := seq.Next(ctx)
			if err != nil {
				return err
			}
			if id <= last {
				return fmt.Errorf("id %d after %d", id, last)
			}
			last = id
		}
		n += 4096
		if time.Now().After(deadline) {
			break
		}
	}
	idsPerS := float64(n) / time.Since(start).Seconds()

	lock := c.Lock("bench-go-" + suffix)
	if g, err := lock.Acquire(ctx); err != nil { // open the session first
		return err
	} else if err := g.Release(ctx); err != nil {
		return err
	}
	var ops int
	start = time.Now()
	deadline = start.Add(dur)
	for time.Now().Before(deadline) {
		g, err := lock.Acquire(ctx)
		if err != nil {
			return err
		}
		if err := g.Release(ctx); err != nil {
			return err
		}
		ops++
	}
	lockPerS := float64(ops) / time.Since(start).Seconds()

	out, err := json.Marshal(result{Client: "go", IdsPerS: idsPerS, Block: block, LockOpsPerS: lockPerS, Seconds: seconds})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}
