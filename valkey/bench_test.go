package valkey_test

import (
	"context"
	"testing"

	"github.com/seed05627090/lock"
	lockvalkey "github.com/seed05627090/lock/valkey"
)

// BenchmarkAcquireRelease is one uncontended acquire and release through
// this driver on the tests' Redis: two round trips, the library's and the
// client's allocations included (the root module's
// BenchmarkRedisAcquireRelease is the same on go-redis).
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	cleanKeys(b)
	c, err := lock.NewClient(lockvalkey.NewProvider(newValkey(b)), lock.WithPrefix(uniqueName(b)+":"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	b.ReportAllocs()
	for range b.N {
		l, err := c.Acquire(ctx, "bench", lock.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
