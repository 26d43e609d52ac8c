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

// The benchmarks of the provider's calls are locktest's (see
// locktest.AcquireRelease):
//
//	go test -run '^$' -bench 'AcquireRelease|Renew|HandOver' -benchtime 3s .

// BenchmarkAcquireRelease measures one uncontended Acquire and its Release,
// two round trips to the server, one key after another.
func BenchmarkAcquireRelease(b *testing.B) {
	locktest.AcquireRelease(b, newProvider(b, testPrefix(b)))
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

// BenchmarkRenew measures one renewal of a held record.
func BenchmarkRenew(b *testing.B) {
	locktest.Renew(b, newProvider(b, testPrefix(b)))
}

// BenchmarkHandOver measures a lock passed from holder to holder through
// the queue: Release, NOTIFY, and the next holder's grant read by Listen.
func BenchmarkHandOver(b *testing.B) {
	locktest.HandOver(b, newProvider(b, testPrefix(b)))
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

// BenchmarkClaimAcquireRelease measures one uncontended AcquireClaim and
// its ReleaseClaim (two round trips, two commits) on a counted name of
// limit 1, and of limit 1,024 with 8 other claims held: the cost does not
// grow with the limit.
func BenchmarkClaimAcquireRelease(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	for _, limit := range []int{1, lock.MaxLimit} {
		b.Run("limit="+strconv.Itoa(limit), func(b *testing.B) {
			key := "bench:" + randomHex(4)
			if limit > 1 {
				for i := range 8 {
					c := lock.Claim{Owner: "other-" + strconv.Itoa(i), Weight: 1, Limit: limit, Kind: lock.KindSemaphore, TTL: time.Hour}
					if _, err := p.AcquireClaim(ctx, key, c); err != nil {
						b.Fatal(err)
					}
				}
			}
			c := lock.Claim{Owner: "o-1", Weight: 1, Limit: limit, Kind: lock.KindSemaphore, TTL: 10 * time.Second}
			b.ResetTimer()
			for range b.N {
				if r, err := p.AcquireClaim(ctx, key, c); err != nil || r.Owner != c.Owner {
					b.Fatal(r, err)
				}
				if err := p.ReleaseClaim(ctx, key, c.Owner); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
