package lock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// countingListen counts the grants delivered to its Client's inbox.
type countingListen struct {
	lock.Provider
	delivered *atomic.Int64
}

func (p countingListen) Listen(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error) {
	return p.Provider.Listen(ctx, inbox, func(g lock.Grant) {
		p.delivered.Add(1)
		deliver(g)
	})
}

// TestIdleClientsHearNothing: 100 Clients that have waited once (so they
// listen on their inboxes) and then sit idle receive no message while 10,000
// uncontended acquire+release cycles and a few hundred handoffs happen on
// other locks, and an uncontended release costs Redis the same bytes with
// them as without them.
func TestIdleClientsHearNothing(t *testing.T) {
	rc := realRedis(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	var heard atomic.Int64
	const idle = 100
	for i := range idle {
		p := countingListen{Provider: lock.NewRedisProvider(rc), delivered: &heard}
		c := newClient(t, p)
		// A wait that is handed the lock: the Client listens from now on.
		name := uniqueName(t)
		holder := newClient(t, lock.NewRedisProvider(rc))
		l, err := holder.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l2, err := c.Acquire(ctx, name, lock.Options{Wait: true})
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		require.Eventually(t, func() bool { return queued(ctx, rc, holder.Key(name)) }, 5*time.Second, time.Millisecond,
			"idle client %d queues", i)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, <-got)
	}
	require.EqualValues(t, idle, heard.Load(), "each idle client heard its own grant once")
	heard.Store(0)

	active := newClient(t, lock.NewRedisProvider(rc))
	other := newClient(t, lock.NewRedisProvider(rc))
	name := uniqueName(t)
	cycles := func(n int) int64 {
		before := netOutput(ctx, t, rc)
		for range n {
			l, err := active.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		return (netOutput(ctx, t, rc) - before) / int64(n)
	}
	perCycle := cycles(10_000)

	// Handoffs between two active Clients: each release publishes, to the
	// other active Client only.
	var wg sync.WaitGroup
	for _, c := range []*lock.Client{active, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				l, err := c.Acquire(ctx, name+":busy", lock.Options{Wait: true})
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, l.Release(ctx))
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, heard.Load(), "idle Clients received messages about locks they do not wait for")

	t.Logf("Redis output per uncontended cycle with %d idle listening Clients: %d bytes", idle, perCycle)
	assert.Less(t, perCycle, int64(200), "an uncontended acquire+release writes two short replies, whoever listens")
}

// queued reports whether key's wait queue holds anyone.
func queued(ctx context.Context, rc *redis.Client, key string) bool {
	_, _, q, err := lock.RedisKeys(key)
	if err != nil {
		return false
	}
	n, err := rc.LLen(ctx, q).Result()
	return err == nil && n > 0
}

// netOutput returns the bytes Redis has written to its clients so far.
func netOutput(ctx context.Context, t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(ctx, "stats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no total_net_output_bytes in INFO stats")
	return 0
}
