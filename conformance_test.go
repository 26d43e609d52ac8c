package lock_test

import (
	"testing"

	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
)

// TestProviderConformance runs the exported conformance suite, locktest.Run,
// against every built-in backend (memory, miniredis, real Redis), so that they
// prove themselves the way any other backend does; then, on the Redis
// backends, the checks of what the Redis provider stores, which read its keys
// (lock.RedisKeys) and so cannot be part of the generic suite. Under -short
// the suite runs on memory and Redis only, without its long checks.
func TestProviderConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		if b.name == "miniredis" {
			testenv.SkipShort(t, "the suite on miniredis (5-7 s); memory and Redis run it")
		}
		var fence func(testing.TB) locktest.Fence // the memory backend's: in memory
		if b.raw != nil {
			fence = func(testing.TB) locktest.Fence { return locktest.RedisFence(b.raw) }
		}
		locktest.Run(t, locktest.Backend{
			New:             b.replica,
			Expires:         canExpire(t, b),
			SkipsUnlistened: true, // neither Redis backend is a Cluster
			ExclusiveInbox:  b.raw == nil,
			Remote:          b.raw != nil,
			Fence:           fence, // the history's fenced writes: lock.RedisFence
		})
		if b.raw != nil {
			redisStorageConformance(t, b)
		}
	})
}
