package locktest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seed05627090/lock"
)

// The benchmarks of a provider's calls, the same on every backend. A
// backend's module runs them on its providers:
//
//	func BenchmarkAcquireRelease(b *testing.B) { locktest.AcquireRelease(b, p) }
//
//	go test -run '^$' -bench 'AcquireRelease|Renew|HandOver' .
//
// Each runs b.N ops on p, on a key of its own, and fails b on the first
// error.

// AcquireRelease benchmarks one uncontended Acquire of a key and its
// Release, one after another.
func AcquireRelease(b *testing.B, p lock.Provider) {
	ctx := context.Background()
	key := uniqueName(b)
	b.ResetTimer()
	for range b.N {
		if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx, key, "o-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// Renew benchmarks one renewal of a held record.
func Renew(b *testing.B, p lock.Provider) {
	ctx := context.Background()
	key := uniqueName(b)
	if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := p.Renew(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	_ = p.Release(ctx, key, "o-1")
}

// HandOver benchmarks a lock passed from holder to holder through the
// queue: a waiter queues, the holder releases, and the grant reaches the
// waiter's Listen.
func HandOver(b *testing.B, p lock.Provider) {
	ctx := context.Background()
	key := uniqueName(b)
	grants := make(chan lock.Notice, 16)
	stop, err := p.Listen(ctx, key+":inbox", func(g lock.Notice) {
		if g.Key != "" {
			grants <- g
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	holder := "o-0"
	if _, err := p.Acquire(ctx, key, holder, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		w := lock.Wait{Owner: "o-" + strconv.Itoa(i), TTL: 10 * time.Second, Inbox: key + ":inbox"}
		if _, err := p.Queue(ctx, key, w); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx, key, holder); err != nil {
			b.Fatal(err)
		}
		if g := <-grants; g.Owner != w.Owner {
			b.Fatalf("grant to %q, want %q", g.Owner, w.Owner)
		}
		holder = w.Owner
	}
	b.StopTimer()
	_ = p.Release(ctx, key, holder)
}
