package faults_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/locktest"
)

// TestDriverFaults runs the core fault scenarios (faults.Scenarios: a
// stopped holder, a server restart, a Sentinel failover, killed pub/sub
// connections) through the go-redis driver; the rueidis and valkey-go
// modules run them through theirs.
func TestDriverFaults(t *testing.T) {
	faults.Scenarios(t, faults.Driver{
		Provider: func(t testing.TB, addr string) lock.Provider { return lock.NewRedisProvider(newRedis(t, addr)) },
		Sentinel: func(t testing.TB, addrs []string) lock.Provider {
			rc := redis.NewUniversalClient(sentinelOptions(addrs))
			t.Cleanup(func() { _ = rc.Close() })
			return lock.NewRedisProvider(rc)
		},
		Fence: func(t testing.TB, addr string) locktest.Fence { return locktest.RedisFence(newRedis(t, addr)) },
	})
}
