package bakery_test

import (
	"context"
	"testing"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// BenchmarkSequenceNext measures Next from local blocks (block 100,000,
// background prefetch), one goroutine.
func BenchmarkSequenceNext(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	seq, err := c.Sequence(unique("bench"), bakery.SequenceOptions{Block: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := seq.Next(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := seq.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSequenceNextParallel measures Next from many goroutines sharing
// one Sequence.
func BenchmarkSequenceNextParallel(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	seq, err := c.Sequence(unique("bench"), bakery.SequenceOptions{Block: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := seq.Next(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLockAcquireRelease measures an acquire+release pair on an
// uncontended lock.
func BenchmarkLockAcquireRelease(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	lock := c.Lock(unique("bench"))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, err := lock.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
