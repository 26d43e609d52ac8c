package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
)

// BenchmarkAcquireRelease measures one uncontended Acquire and its Release,
// two round trips to the server, one key after another.
func BenchmarkAcquireRelease(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	key := "bench:" + randomHex(4)
	for b.Loop() {
		if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx, key, "o-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseParallel is BenchmarkAcquireRelease from several
// goroutines, each on keys of its own.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	base := "bench:" + randomHex(4) + ":"
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		key := base + strconv.FormatInt(n.Add(1), 10)
		for pb.Next() {
			if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
				b.Error(err)
				return
			}
			if err := p.Release(ctx, key, "o-1"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRenewal measures one renewal (Update) of a held record.
func BenchmarkRenewal(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	key := "bench:" + randomHex(4)
	if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := p.Renew(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandOver measures a lock passed from holder to holder through
// the queue: Release, NOTIFY, and the next holder's grant read by Listen.
func BenchmarkHandOver(b *testing.B) {
	prefix := testPrefix(b)
	p := newProvider(b, prefix)
	ctx := context.Background()
	key := "bench:" + randomHex(4)
	inbox := "inbox:" + randomHex(4)
	grants := make(chan lock.Grant, 1)
	stop, err := p.Listen(ctx, inbox, func(g lock.Grant) { grants <- g })
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	holder := "o-0"
	if _, err := p.Acquire(ctx, key, holder, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		w := lock.Waiter{Owner: "o-" + strconv.Itoa(i), TTL: 10 * time.Second, Inbox: inbox}
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
	_ = p.Release(ctx, key, holder)
}

// BenchmarkElectionFailover measures how long a role is without a running
// leader, from the leader's death or from its Resign to the function of a
// Lead waiting behind it, on a pool of its own, running (see
// locktest.ElectionFailover). Run it with a bounded count:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 20x .
func BenchmarkElectionFailover(b *testing.B) {
	prefix := testPrefix(b)
	locktest.ElectionFailover(b, locktest.Backend{New: func(t testing.TB) lock.Provider { return newProvider(t, prefix) }})
}
