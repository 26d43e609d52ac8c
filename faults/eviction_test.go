package faults_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// The windows that a misconfigured Redis opens, measured, not prevented: the
// library cannot know that Redis dropped a record until its holder's next
// renewal asks. Each fault is injected just after a renewal, so each figure is
// close to the worst case, a third of a lease.
const (
	evictLease  = 1200 * time.Millisecond
	evictRounds = 3
)

// TestEvictionLRU measures how long two holders overlap when Redis evicts a
// held lock's record: maxmemory-policy volatile-lru evicts it, since records
// carry a TTL. A holder has the lock, memory fills with keys without a TTL
// until the record is evicted, the filler is deleted, and a second Client
// acquires the lock. The window runs from that grant until the first holder's
// Done closes.
func TestEvictionLRU(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 15*time.Second)
	require.NoError(t, direct.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	holder := newClient(t, newRedis(t, srv.Addr))
	second := newClient(t, newRedis(t, srv.Addr))

	windows := make([]time.Duration, 0, evictRounds)
	for round := range evictRounds {
		name := "evict-" + strconv.Itoa(round)
		require.NoError(t, direct.ConfigSet(ctx, "maxmemory", "0").Err())
		first := holdAndWatch(t, ctx, holder, name)
		awaitRenewal(t, ctx, direct, name)

		evict(t, ctx, direct, name)
		fault(t, "evict the record of a held lock (volatile-lru)")
		windows = append(windows, takeOver(t, ctx, second, name, first))
	}
	reportWindows(t, "eviction", windows)
}

// TestEvictionRestart measures the same window when Redis, without
// persistence, restarts under a held lock: a second Client acquires the lock
// as soon as the server answers again.
func TestEvictionRestart(t *testing.T) {
	srv := faults.StartRedis(t) // --save "" --appendonly no
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 15*time.Second)
	holder := newClient(t, newRedis(t, srv.Addr))
	second := newClient(t, newRedis(t, srv.Addr))

	windows := make([]time.Duration, 0, evictRounds)
	for round := range evictRounds {
		name := "restart-" + strconv.Itoa(round)
		first := holdAndWatch(t, ctx, holder, name)
		awaitRenewal(t, ctx, direct, name)

		require.NoError(t, srv.Kill())
		require.NoError(t, srv.Start(), "restart Redis")
		fault(t, "restart Redis without persistence under a held lock")
		windows = append(windows, takeOver(t, ctx, second, name, first))
	}
	reportWindows(t, "restart", windows)
}

// watched is a held lock and when its holder was told it had lost it.
type watched struct {
	lock *lock.Lock
	told chan time.Time
}

// holdAndWatch acquires name with a lease of evictLease and watches its Done.
func holdAndWatch(t *testing.T, ctx context.Context, c *lock.Client, name string) watched {
	t.Helper()
	l, err := c.Acquire(ctx, name, lock.Options{Lease: evictLease, MaxDuration: 20 * time.Second})
	require.NoError(t, err, "first holder acquires %q", name)
	stats.grants.Add(1)
	w := watched{lock: l, told: make(chan time.Time, 1)}
	go func() {
		select {
		case <-l.Done():
			w.told <- time.Now()
		case <-ctx.Done():
		}
	}()
	return w
}

// awaitRenewal returns just after the holder of name has renewed its record:
// when the record's TTL goes up.
func awaitRenewal(t *testing.T, ctx context.Context, direct *redis.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(evictLease)
	last := time.Duration(-1)
	for time.Now().Before(deadline) {
		ttl, err := direct.PTTL(ctx, recordKey(keyOf(name))).Result()
		require.NoError(t, err)
		if last >= 0 && ttl > last+20*time.Millisecond {
			return
		}
		last = ttl
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("no renewal of %q seen within a lease", name)
}

// evict fills memory with keys without a TTL until Redis, under volatile-lru,
// evicts the record of name, then deletes the filler and lifts the limit: the
// memory pressure has passed, the record has gone.
func evict(t *testing.T, ctx context.Context, direct *redis.Client, name string) {
	t.Helper()
	used, err := direct.Info(ctx, "memory").Result()
	require.NoError(t, err)
	base := atoi(t, infoLine(t, used, "used_memory"))
	require.NoError(t, direct.ConfigSet(ctx, "maxmemory", strconv.FormatInt(base+1<<20, 10)).Err())
	value := strings.Repeat("x", 64<<10)
	var filler []string
	for batch := 0; ; batch++ {
		require.Less(t, batch, 20, "the record of %q is still there after filling %d MB", name, batch*2)
		pipe := direct.Pipeline()
		for range 32 {
			key := "filler:" + strconv.Itoa(len(filler))
			filler = append(filler, key)
			pipe.Set(ctx, key, value, 0) // once nothing is left to evict: OOM, ignored
		}
		_, _ = pipe.Exec(ctx)
		n, err := direct.Exists(ctx, recordKey(keyOf(name))).Result()
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	require.NoError(t, direct.Del(ctx, filler...).Err())
	require.NoError(t, direct.ConfigSet(ctx, "maxmemory", "0").Err())
}

// takeOver has c acquire name at once, as the first holder still believes
// it holds it, and returns how long both held it: from this grant until the
// first holder was told. The first holder must be told within a lease.
func takeOver(t *testing.T, ctx context.Context, c *lock.Client, name string, first watched) time.Duration {
	t.Helper()
	var l *lock.Lock
	var err error
	for range 100 { // the server may still be coming up
		if l, err = c.Acquire(ctx, name, lock.Options{Lease: evictLease}); err == nil || errors.Is(err, lock.ErrNotAcquired) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, err, "second client acquires %q once its record is gone", name)
	granted := time.Now()
	stats.grants.Add(1)
	expect(t, l.Token() > first.lock.Token(), "%q: token %d of the second holder is not greater than the first's %d",
		name, l.Token(), first.lock.Token())
	defer func() { _ = l.Release(ctx) }()

	select {
	case told := <-first.told:
		expect(t, errors.Is(first.lock.Err(), lock.ErrLost), "%q: first holder's Err is %v, want ErrLost", name, first.lock.Err())
		window := max(told.Sub(granted), 0)
		t.Logf("%q: two holders for %v (first holder told %v after the second grant)",
			name, window.Round(time.Millisecond), told.Sub(granted).Round(time.Millisecond))
		return window
	case <-time.After(evictLease + 2*time.Second):
		expect(t, false, "%q: first holder not told %v after another holder was granted the lock", name, evictLease+2*time.Second)
		return evictLease + 2*time.Second
	}
}

// reportWindows logs the windows and prints the line the README quotes.
func reportWindows(t *testing.T, what string, windows []time.Duration) {
	t.Helper()
	lo, hi := slices.Min(windows), slices.Max(windows)
	t.Logf("%s: two holders for %v to %v over %d rounds, lease %v, fault just after a renewal",
		what, lo.Round(time.Millisecond), hi.Round(time.Millisecond), len(windows), evictLease)
	figures("%s window min=%dms max=%dms rounds=%d lease=%v (fault just after a renewal; renewal every lease/3)",
		what, lo.Round(time.Millisecond).Milliseconds(), hi.Round(time.Millisecond).Milliseconds(), len(windows), evictLease)
}

// infoLine returns one field of an INFO reply.
func infoLine(t *testing.T, text, name string) string {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	t.Fatalf("no %s in INFO", name)
	return ""
}
