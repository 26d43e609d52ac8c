package lock_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// scaleClock is a clock that moves only when told to.
type scaleClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *scaleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *scaleClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
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
	const n = 200_000
	ctx := context.Background()
	clock := &scaleClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := lock.NewMemoryProvider(lock.MemoryClock(clock))
	waiter := lock.Waiter{Owner: "waiter", TTL: time.Second, Inbox: "scale-inbox"}
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
	assert.Equal(t, 0, p.Len(), "every record expired")
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

// TestMemoryProviderKeepsNothingPerName: a lock per resource on the memory
// provider, 1,000,000 acquire+release cycles on distinct names, leaves no
// record, and the heap ends about where it started: the tokens come from one
// counter, and nothing of a released name is kept (issue 17).
func TestMemoryProviderKeepsNothingPerName(t *testing.T) {
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
	assert.Equal(t, 0, p.Len(), "no record left")
	after := heapAlloc()
	t.Logf("heap: %d bytes before, %d after %d names", baseline, after, n)
	// A record is about 200 bytes: a map or heap that kept one per name
	// would hold some 200 MB here.
	assert.Less(t, int64(after)-int64(baseline), int64(8<<20), "the heap grew by more than 8 MiB over %d names", n)
}
