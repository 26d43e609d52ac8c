package lock_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestManyLocksHeld holds 10,000 locks at once on one Client with a 9 s
// lease (renewed every 3 s) against the real Redis, and measures what
// holding them costs: goroutines (timers, not goroutines, wait for each
// renewal), memory per held lock, and Redis calls per second for renewal.
// The figures are logged for the README; the assertions are the properties:
// no goroutine per lock, every lock still held after several renewals, and
// renewals at about one call per lock per third of a lease.
func TestManyLocksHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 10,000 locks for several seconds")
	}
	rc := realRedis(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	const n = 10_000
	const lease = 9 * time.Second
	prefix := "many:" + strings.ReplaceAll(t.Name(), "/", ":") + ":"
	c := newClient(t, lock.NewRedisProvider(rc), lock.WithPrefix(prefix))
	t.Cleanup(func() { deleteKeys(t, rc, prefix) })

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	locks := make([]*lock.Lock, 0, n)
	for i := range n {
		l, err := c.Acquire(ctx, "k"+strconv.Itoa(i), lock.Options{Lease: lease})
		require.NoError(t, err)
		locks = append(locks, l)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perLock := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	extra := runtime.NumGoroutine() - goroutines

	calls := func() int64 { return evalCalls(ctx, t, rc) }
	start, c0 := time.Now(), calls()
	time.Sleep(lease) // three renewals of every lock
	rate := float64(calls()-c0) / time.Since(start).Seconds()

	for _, l := range locks {
		assert.NoError(t, l.Err(), "held through its renewals")
	}
	for _, l := range locks {
		require.NoError(t, l.Release(ctx))
	}
	t.Logf("%d locks held: %d bytes of heap per lock, %d goroutines more, %.0f script calls/s for renewal (%.2f per lock per second; a lease of %v renews every %v)",
		n, perLock, extra, rate, rate/n, lease, lease/3)
	assert.Less(t, extra, 50, "holding locks must not take a goroutine each")
	// One renewal per lock per lease/3: n/(lease/3) calls a second; a busy
	// machine may renew late (the lease timer would tell), and the shared
	// Redis also serves other tests, so only the order of magnitude.
	want := float64(n) / (lease / 3).Seconds()
	assert.Greater(t, rate, want/3, "renewal calls per second: far fewer than one per lock per lease/3")
	assert.Less(t, rate, 3*want, "renewal calls per second: far more than one per lock per lease/3")
}

// evalCalls returns how many scripts Redis has run so far.
func evalCalls(ctx context.Context, t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				v, err := strconv.ParseInt(calls, 10, 64)
				require.NoError(t, err)
				total += v
			}
		}
	}
	return total
}

// deleteKeys deletes every key under prefix.
func deleteKeys(t *testing.T, rc *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := rc.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		_ = rc.Del(ctx, iter.Val()).Err()
	}
}
