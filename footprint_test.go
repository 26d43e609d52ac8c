package lock_test

import (
	"context"
	"runtime"
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
	"github.com/seed05627090/lock/internal/testenv"
)

// What holding and churning locks costs: goroutines, heap and Redis calls
// for 10,000 held locks, Redis output with idle listening Clients, and the
// memory provider giving its memory back.

// TestManyLocksHeld holds 10,000 locks at once on one Client with a 9 s
// lease (renewed every 3 s) against the real Redis, and measures what
// holding them costs: goroutines (timers, not goroutines, wait for each
// renewal; a renewal in flight has one), memory per held lock, and Redis calls per second for renewal.
// The figures are logged for the README; the assertions are the properties:
// no goroutine per lock, every lock still held after several renewals, and
// renewals at about one call per lock per third of a lease.
func TestManyLocksHeld(t *testing.T) {
	testenv.SkipShort(t, "a footprint test: holds 10,000 locks for several seconds")
	rc := realRedis(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	const n = 10_000
	const lease = 9 * time.Second
	prefix := "many:" + uniqueName(t) + ":" // a run of its own: another run of this test may share the Redis
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
	// A renewal runs in a goroutine of its own until its reply, and the
	// first locks are due while the last are acquired: the renewals in
	// flight at that instant are counted too (70 on a loaded CI machine).
	// One goroutine per held lock would be n.
	assert.Less(t, extra, n/10, "holding locks must not take a goroutine each")
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

// countingListen returns a provider over p that counts, in delivered, the
// grants delivered to its Client's inbox.
func countingListen(p lock.Provider, delivered *atomic.Int64) *hookedProvider {
	return &hookedProvider{Provider: p, OnListen: func(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
		return p.Listen(ctx, inbox, func(g lock.Notice) {
			delivered.Add(1)
			deliver(g)
		})
	}}
}

// TestIdleClientsHearNothing: 100 Clients that have waited once (so they
// listen on their inboxes) and then sit idle receive no message while 10,000
// uncontended acquire+release cycles and a few hundred handoffs happen on
// other locks, and an uncontended release costs Redis the same bytes with
// them as without them.
func TestIdleClientsHearNothing(t *testing.T) {
	testenv.SkipShort(t, "a footprint test of 3-5 s")
	rc := realRedis(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	var heard atomic.Int64
	const idle = 100
	for i := range idle {
		p := countingListen(lock.NewRedisProvider(rc), &heard)
		c := newClient(t, p)
		// A wait that is handed the lock: the Client listens from now on.
		name := uniqueName(t)
		holder := newClient(t, lock.NewRedisProvider(rc))
		l, err := holder.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		got := acquireAndRelease(ctx, c, name, lock.Options{Wait: true})
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

// heapAlloc returns the bytes of live heap objects, after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryProviderGivesMemoryBack fills the provider with 200k records, each
// with a queued waiter, lets the waiters leave and the records expire, and
// checks that the provider, still in use, holds about as much memory as when it
// was empty: its maps and its expiry heap were given back.
func TestMemoryProviderGivesMemoryBack(t *testing.T) {
	testenv.SkipShort(t, "a footprint test of 2-4 s")
	const n = 200_000
	ctx := context.Background()
	clock := testenv.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	p := lock.NewMemoryProvider(lock.MemoryClock(clock))
	waiter := lock.Wait{Owner: "waiter", TTL: time.Second, Inbox: "scale-inbox"}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "scale-" + strconv.Itoa(i)
	}
	baseline := heapAlloc()

	for _, key := range keys {
		_, err := p.Acquire(ctx, key, "holder", time.Second)
		require.NoError(t, err, "acquire a free key")
		rec, err := p.Queue(ctx, key, waiter)
		require.NoError(t, err, "queue for a held key")
		require.True(t, rec.Queued, "a waiter for a held key is queued")
	}
	peak := heapAlloc()
	for _, key := range keys {
		require.NoError(t, p.Leave(ctx, key, waiter), "leave the queue")
	}
	clock.Advance(2 * time.Second)
	assert.Equal(t, 0, lock.MemoryLen(p), "every record expired")
	_, err := p.Acquire(ctx, "scale-after", "holder", time.Second)
	require.NoError(t, err, "the provider is still usable")
	require.NoError(t, p.Release(ctx, "scale-after", "holder"))
	after := heapAlloc()
	runtime.KeepAlive(p)
	runtime.KeepAlive(keys)

	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	t.Logf("heap: %.2f MB empty, %.2f MB with %d records and waiters, %.2f MB after they left and expired",
		mb(baseline), mb(peak), n, mb(after))
	const slack = 2 << 20
	assert.Less(t, after, baseline+slack,
		"after every record expired the heap should be within 2 MB of the empty provider's")
}

// TestMemoryProviderKeepsNothingPerName: a lock per resource on the memory
// provider, 1,000,000 acquire+release cycles on distinct names, leaves no
// record, and the heap ends about where it started: the tokens come from one
// counter, and nothing of a released name is kept (issue 17).
func TestMemoryProviderKeepsNothingPerName(t *testing.T) {
	testenv.SkipShort(t, "a footprint test of 2-10 s")
	const n = 1_000_000
	ctx := context.Background()
	p := lock.NewMemoryProvider()
	baseline := heapAlloc()
	var last uint64
	for i := range n {
		key := "order:" + strconv.Itoa(i)
		rec, err := p.Acquire(ctx, key, "o", time.Minute)
		require.NoError(t, err)
		require.Greater(t, rec.Token, last, "tokens increase")
		last = rec.Token
		require.NoError(t, p.Release(ctx, key, "o"))
	}
	assert.Equal(t, 0, lock.MemoryLen(p), "no record left")
	after := heapAlloc()
	t.Logf("heap: %d bytes before, %d after %d names", baseline, after, n)
	// A record is about 200 bytes: a map or heap that kept one per name
	// would hold some 200 MB here.
	assert.Less(t, int64(after)-int64(baseline), int64(8<<20), "the heap grew by more than 8 MiB over %d names", n)
}

// BenchmarkMemoryProviderLiveKeys measures one Acquire and Release of a key
// while n other records are live, and the heap bytes each live record costs
// (key string, record, map entry and expiry heap slot). The live records
// expire in an hour or a little more, in no particular order; the benchmarked
// key's TTL is a second, so it goes to the top of the expiry heap and back
// out: the heap's worst case, O(log n).
func BenchmarkMemoryProviderLiveKeys(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "bench-" + strconv.Itoa(i)
	}
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		if n > 100_000 && testing.Short() {
			continue
		}
		before := heapAlloc()
		p := lock.NewMemoryProvider()
		for i := 0; i < n; i++ {
			ttl := time.Hour + time.Duration(i*7919%n)*time.Millisecond // deadlines out of order
			if _, err := p.Acquire(ctx, "live-"+strconv.Itoa(i), "holder", ttl); err != nil {
				b.Fatal(err)
			}
		}
		perKey := float64(heapAlloc()-before) / float64(n)
		b.Run("live="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportMetric(perKey, "B/livekey")
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				key := keys[i%len(keys)]
				if _, err := p.Acquire(ctx, key, "bench", time.Second); err != nil {
					b.Fatal(err)
				}
				if err := p.Release(ctx, key, "bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
		runtime.KeepAlive(p)
	}
}
