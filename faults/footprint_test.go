package faults_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// A lock per resource (an order, a tick) leaves nothing behind in Redis:
// after many distinct names, the keys left are the fencing counters, one per
// hash slot at most, and the memory Redis uses grows by at most
// footprintMemory (issue 17).
const (
	footprintCycles = 100_000 // Acquire+Release on distinct names
	footprintMemory = 2 << 20 // bytes of used_memory, one server
	footprintSlots  = 16384   // counters at most: one per hash slot (one prefix)
	// On a Cluster a key costs more (Redis keeps each key in its slot's
	// list too, and a hash table per node): 16,384 counters take 2.2-2.5 MB
	// on three primaries (MEMORY STATS: 135 bytes a key, against 97 on one
	// server), and the nodes' per-command statistics and cluster bookkeeping
	// vary by a few hundred KB between runs.
	footprintMemoryCluster = 3 << 20 // 3 MiB
	// Valkey 8 keeps a hash table per slot on a Cluster node (its kvstore),
	// and the counters, one in nearly every slot, each fill one: 16,336
	// counters took 3.37 MB on three primaries (206 bytes a key).
	footprintMemoryClusterValkey = 4 << 20 // 4 MiB
)

// TestFootprint runs footprintCycles acquire+release cycles on distinct
// names, and more through Middleware, RunTick and waits that queued, against
// a Redis of its own, and checks what is left: no key but the fencing
// counters, none with a TTL, at most one per slot, and used_memory up by at
// most footprintMemory. Then it counts the server's calls per uncontended
// cycle (INFO commandstats, the calls inside scripts included): at most 6,
// on fresh names and on reused ones, and no PUBLISH.
func TestFootprint(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 5*time.Minute)
	nodes := []*redis.Client{direct}
	newLockClient := func() (*lock.Client, func()) {
		rc := newRedis(t, srv.Addr, func(o *redis.Options) { o.PoolSize = 40; o.ClientName = footprintClientName })
		c := newClient(t, rc)
		return c, func() { _ = c.Close(); _ = rc.Close() }
	}
	before := footprintBaseline(t, ctx, nodes, newLockClient)
	c, closeClient := newLockClient()
	footprintWork(t, ctx, c, "order", footprintCycles, true)
	footprintCheck(t, ctx, nodes, before, closeClient)

	// A Client again, for the calls.
	c, _ = newLockClient()

	// Calls per cycle, on fresh names and then on the same names again.
	names := make([]string, 5000)
	for i := range names {
		names[i] = "calls:" + strconv.Itoa(i)
	}
	for _, round := range []string{"fresh", "reused"} {
		counters := dbSize(t, ctx, nodes)
		require.NoError(t, direct.ConfigResetStat(ctx).Err())
		for _, name := range names {
			l, err := c.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		stats, err := direct.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		created := dbSize(t, ctx, nodes) - counters // counters made in this round: TIME and SET each
		calls := serverCalls(stats)
		perCycle := float64(calls) / float64(len(names))
		t.Logf("%s names: %d server calls for %d cycles (%.3f a cycle), %d counters created", round, calls, len(names), perCycle, created)
		expect(t, calls <= int64(6*len(names))+2*created,
			"%s names: %d server calls for %d acquire+release cycles, more than 6 a cycle (and 2 per counter created: %d)", round, calls, len(names), created)
		expect(t, infoCount(stats, "cmdstat_publish:", "calls=") == 0, "an uncontended cycle published: %s", stats)
	}
}

// TestFootprintCluster is TestFootprint on a Redis Cluster of three
// primaries: the counters are spread over the nodes, one per slot at most in
// all, and used_memory grows by at most footprintMemoryCluster. The Client's connections are closed before used_memory is read: with
// sharded pub/sub, a Client keeps a pub/sub connection per slot it has
// waited in until it closes (the Client's, not the names'; the README
// states it).
func TestFootprintCluster(t *testing.T) {
	addrs := startCluster(t)
	ctx := ctxTimeout(t, 5*time.Minute)
	var nodes []*redis.Client
	for _, a := range addrs {
		nodes = append(nodes, newRedis(t, a))
	}
	newLockClient := func() (*lock.Client, func()) {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, PoolSize: 40, ClientName: footprintClientName})
		t.Cleanup(func() { _ = cc.Close() })
		c := newClient(t, cc)
		return c, func() { _ = c.Close(); _ = cc.Close() }
	}
	limit := int64(footprintMemoryCluster)
	if rep := clusterServer(t, ctx, addrs); rep.Server == "valkey" {
		limit = footprintMemoryClusterValkey
	}
	before := footprintBaseline(t, ctx, nodes, newLockClient)
	c, closeClient := newLockClient()
	footprintWork(t, ctx, c, "order", footprintCycles, true)
	footprintCheckMemory(t, ctx, nodes, before, func() {
		conns, chans, err := pubSubCounts(ctx, nodes)
		t.Logf("before the Client closes: %d pub/sub connections, %d shard channels subscribed (%v), used_memory %d bytes", conns, chans, err, usedMemory(t, ctx, nodes))
		closeClient()
	}, limit)
}

// footprintBaseline runs a little of the work (100 names) with a Client
// that it closes, and returns the nodes' used_memory then: what Redis keeps
// whatever the names (the scripts, each command's latency histogram, the
// cluster's bookkeeping) is in it, and so are the few counters of those
// names (about 10 KB).
func footprintBaseline(t *testing.T, ctx context.Context, nodes []*redis.Client, newLockClient func() (*lock.Client, func())) int64 {
	t.Helper()
	c, closeClient := newLockClient()
	footprintWork(t, ctx, c, "warm-up", 100, true)
	// On a Cluster, the shard channels of the waits are unsubscribed after
	// a linger, and their connections checked with PING: let that happen
	// here too, so that those commands' statistics are in the baseline.
	time.Sleep(4 * time.Second)
	closeClient()
	waitClosed(t, ctx, nodes)
	return usedMemory(t, ctx, nodes)
}

// footprintClientName names the connections of the lock Clients of the
// footprint tests (go-redis sends it with HELLO and CLIENT SETNAME as it
// sets a connection up; serverCalls leaves both out), so that waitClosed
// can tell when the servers have seen them closed.
const footprintClientName = "footprint-lock"

// waitClosed waits until no node lists a connection of a lock Client
// (CLIENT LIST, by footprintClientName): the server frees a connection's
// memory when it sees it closed, which a loaded machine may put off past
// any fixed sleep (40 pooled connections of ~20 KB each).
func waitClosed(t *testing.T, ctx context.Context, nodes []*redis.Client) {
	t.Helper()
	open := func() int {
		n := 0
		for _, node := range nodes {
			list, err := node.ClientList(ctx).Result()
			require.NoError(t, err)
			n += strings.Count(list, " name="+footprintClientName+" ")
		}
		return n
	}
	require.Eventually(t, func() bool { return open() == 0 }, 30*time.Second, 10*time.Millisecond,
		"the servers still list connections of the closed lock Client")
}

// footprintWork runs the traffic of a lock per resource on c: n
// acquire+release cycles on distinct names, n/10 calls of a Middleware with
// a name per argument, n/10 RunTick ticks of a job, and, when queued, n/100
// waits that queued behind a holder and were handed the lock by its release.
func footprintWork(t *testing.T, ctx context.Context, c *lock.Client, base string, n int, queued bool) {
	t.Helper()
	start := time.Now()
	parallel(t, 32, n, func(i int) error {
		l, err := c.Acquire(ctx, base+":"+strconv.Itoa(i), lock.Options{})
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
	t.Logf("%d acquire+release cycles on distinct names in %v", n, time.Since(start).Round(time.Millisecond))

	process, err := lock.Middleware(c, func(context.Context, int) (int, error) { return 0, nil },
		lock.MiddlewareOptions[int]{NameFunc: func(i int) string { return base + ":mw:" + strconv.Itoa(i) }})
	require.NoError(t, err)
	parallel(t, 32, n/10, func(i int) error {
		_, err := process(ctx, i)
		return err
	})

	// Ticks 50 ms apart: each tick's record stays closed for one period
	// after its run (its grace period), then expires.
	const every = 50 * time.Millisecond
	first := time.Now().Truncate(every)
	parallel(t, 32, n/10, func(i int) error {
		return c.RunTick(ctx, base+":job", first.Add(time.Duration(i)*every), every, lock.Options{}, func(context.Context) error { return nil })
	})

	if !queued {
		return
	}
	parallel(t, 8, n/100, func(i int) error {
		_, err := handOver(ctx, c, c, base+":queued:"+strconv.Itoa(i))
		return err
	})
}

// parallel calls fn(0) to fn(n-1) on g goroutines, and fails the test with
// the first error.
func parallel(t *testing.T, g, n int, fn func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = fmt.Errorf("call %d: %w", i, err) })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, first)
}

// footprintCheck checks what the work left on the nodes once the ticks'
// grace periods have run out: only fencing counters, without a TTL, at most
// one per slot, and, once closeClient has closed the lock Client and its
// connections, used_memory at most footprintMemory above before (taken
// before the Client connected: the scripts Redis keeps count too).
func footprintCheck(t *testing.T, ctx context.Context, nodes []*redis.Client, before int64, closeClient func()) {
	footprintCheckMemory(t, ctx, nodes, before, closeClient, footprintMemory)
}

func footprintCheckMemory(t *testing.T, ctx context.Context, nodes []*redis.Client, before int64, closeClient func(), limit int64) {
	t.Helper()
	var keys []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		keys = keys[:0]
		for _, n := range nodes {
			k, err := n.Keys(ctx, "*").Result()
			require.NoError(t, err)
			keys = append(keys, k...)
		}
		others := 0
		for _, k := range keys {
			if !strings.HasSuffix(k, "}:fence") {
				others++
			}
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys other than fencing counters still there 30 s after the work, e.g. %q", others, firstOther(keys))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range nodes {
		for _, k := range mustKeys(t, ctx, n) {
			ttl, err := n.PTTL(ctx, k).Result()
			require.NoError(t, err)
			expect(t, ttl == -1, "fencing counter %q has a TTL (%v)", k, ttl)
			require.True(t, strings.HasPrefix(k, lock.DefaultPrefix+"{"), "counter %q", k)
		}
	}
	closeClient()
	// The server frees a closed connection's memory once it sees the close.
	waitClosed(t, ctx, nodes)
	after := usedMemory(t, ctx, nodes)
	t.Logf("left: %d fencing counters (at most %d); used_memory %d -> %d bytes (+%d)", len(keys), footprintSlots, before, after, after-before)
	expect(t, len(keys) <= footprintSlots, "%d fencing counters left, more than one per slot", len(keys))
	expect(t, after-before <= limit, "used_memory grew by %d bytes, more than %d", after-before, limit)
}

func firstOther(keys []string) string {
	for _, k := range keys {
		if !strings.HasSuffix(k, "}:fence") {
			return k
		}
	}
	return ""
}

func mustKeys(t *testing.T, ctx context.Context, n *redis.Client) []string {
	t.Helper()
	k, err := n.Keys(ctx, "*").Result()
	require.NoError(t, err)
	return k
}

func usedMemory(t *testing.T, ctx context.Context, nodes []*redis.Client) int64 {
	t.Helper()
	var sum int64
	for _, n := range nodes {
		info, err := n.Info(ctx, "memory").Result()
		require.NoError(t, err)
		sum += faults.InfoField(info, "used_memory")
	}
	return sum
}

func dbSize(t *testing.T, ctx context.Context, nodes []*redis.Client) int64 {
	t.Helper()
	var sum int64
	for _, n := range nodes {
		s, err := n.DBSize(ctx).Result()
		require.NoError(t, err)
		sum += s
	}
	return sum
}

// serverCalls adds up the calls of every command in INFO commandstats but
// the test's own (INFO, CONFIG RESETSTAT) and those of a connection's set-up
// or health check, which the client's pool makes now and then (HELLO,
// CLIENT SETINFO, CLIENT SETNAME, PING).
func serverCalls(stats string) int64 {
	var sum int64
	for _, l := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "info", "config|resetstat", "hello", "client|setinfo", "client|setname", "ping":
			continue
		}
		sum += infoCount(name+":"+rest, name+":", "calls=")
	}
	return sum
}
