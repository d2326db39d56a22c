// Command quickstart shows the Go client of bakery serve: ids, a lock,
// and exactly-once processing. Run it with BAKERY_URL set to a running
// `bakery serve`.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	client, err := bakery.NewClient(os.Getenv("BAKERY_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background()) // releases everything still held

	// Unique, increasing ids from locally reserved blocks.
	orders, err := client.Sequence("orders", bakery.SequenceOptions{Block: 1000})
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		id, err := orders.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("order id", id)
	}

	// A fenced lock: work under it until it is released or lost.
	lock := client.Lock("nightly-report")
	grant, err := lock.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding the lock with fencing token", grant.Token())
	select {
	case <-grant.Lost():
		log.Fatal("lost the lock: stop writing under it")
	default:
	}
	if err := grant.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// The scoped form: fn's context is cancelled if the grant is lost.
	err = lock.Do(ctx, func(ctx context.Context, g *bakery.Grant) error {
		fmt.Println("in Do with token", g.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// Exactly once across processes: the second call returns the stored result.
	for i := 0; i < 2; i++ {
		res, err := client.Once(ctx, "emails", "welcome-42", "user 42", func(ctx context.Context) (string, error) {
			fmt.Println("sending the welcome email (runs once)")
			return "sent", nil
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("once:", res)
	}

	// Errors carry the server's kind.
	_, err = client.Lock("not a valid name").Acquire(ctx)
	var e *bakery.Error
	if errors.Is(err, bakery.ErrInvalidInput) && errors.As(err, &e) {
		fmt.Println("error kind", e.Kind, "status", e.Status)
	}
}
