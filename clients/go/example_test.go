package bakery_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// Examples compile with the tests; they need a running server, so they
// have no Output comment and are not run.

func ExampleSequence_Next() {
	ctx := context.Background()
	client, err := bakery.NewClient("http://127.0.0.1:7878")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	seq, err := client.Sequence("orders", bakery.SequenceOptions{Block: 10_000})
	if err != nil {
		log.Fatal(err)
	}
	id, err := seq.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id)
}

func ExampleLock_Acquire() {
	ctx := context.Background()
	client, err := bakery.NewClient("http://127.0.0.1:7878")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	g, err := client.Lock("reports").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Release(ctx)
	work, cancel := g.Context(ctx) // cancelled if the lock is lost
	defer cancel()
	_ = work
	fmt.Println("fencing token", g.Token())
}

func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := bakery.NewClient("http://127.0.0.1:7878")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	events, err := client.Election("scheduler").Observe(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for ev := range events {
		if ev.Term == 0 {
			fmt.Println("nobody leads")
			continue
		}
		fmt.Println("leader at term", ev.Term, "value", *ev.Value)
	}
}

func ExampleClient_Once() {
	ctx := context.Background()
	client, err := bakery.NewClient("http://127.0.0.1:7878")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	res, err := client.Once(ctx, "payments", "invoice-17", `{"amount":42}`, func(ctx context.Context) (string, error) {
		return "charged", nil // runs once across every process
	})
	var fe *bakery.FuncError
	switch {
	case errors.As(err, &fe):
		fmt.Println("the charge failed; the next call retries it:", fe.Err)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(res)
	}
}
