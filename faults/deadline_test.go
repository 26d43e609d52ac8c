package faults_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
)

// TestRedisDeadlines runs faults.Deadlines on Redis: every call returns by
// its context's deadline (or MaxWait) whatever the server behind a proxy
// does: refuses, never answers, answers late, drops the connection. Both
// with go-redis's default options (its socket waits its own read timeout,
// 3 s, whatever the context says) and with ContextTimeoutEnabled. Issue 38:
// a fair wait under a 1 s deadline returned after 2 s (the give-up's Leave
// waited for the release timeout), and a wait with a MaxWait of 300 ms
// against a refused port after 2.28 s (the first attempt had no bound).
func TestRedisDeadlines(t *testing.T) {
	srv := faults.StartRedis(t)
	for _, timeouts := range []bool{false, true} {
		name := "go-redis-defaults"
		if timeouts {
			name = "context-timeout"
		}
		t.Run(name, func(t *testing.T) {
			p, err := faults.NewProxy(srv.Addr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			fault(t, "a proxy in front of Redis refuses, holds, delays and drops the calls of every kind")
			faults.Deadlines(t, p, func(t *testing.T) *lock.Client {
				rc := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: timeouts})
				t.Cleanup(func() { _ = rc.Close() })
				return testenv.NewClient(t, lock.NewRedisProvider(rc))
			})
		})
	}
}
