package faults_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
)

// TestRedisClusterSharded runs, on a real three-master Redis Cluster, the
// conformance suite of lock.Provider on the Redis provider, and measures
// what grants cost the cluster bus: with sharded pub/sub (Redis 7.0 or
// later) a handoff's SPUBLISH is handled by the lock's node alone, and no
// publish message crosses the bus; with PUBLISH (ShardedPubSub(false), as
// on older servers) each handoff is forwarded to every other node. The
// figures are printed in a line that starts with "faults: cluster ".
func TestRedisClusterSharded(t *testing.T) {
	addrs := startCluster(t)
	ctx := ctxTimeout(t, 50*time.Second)
	sharded := clusterSharded(t, ctx, addrs)
	t.Logf("servers support sharded pub/sub: %v", sharded)

	t.Run("conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Backend{
			New: func(t testing.TB) lock.Provider {
				return lock.NewRedisProvider(newClusterRedis(t, addrs))
			},
			Fence:   func(t testing.TB) locktest.Fence { return locktest.RedisFence(newClusterRedis(t, addrs)) },
			Expires: true,
			// An SPUBLISH counts the subscribers of its shard channel
			// exactly; a PUBLISH on a Cluster only one node's.
			SkipsUnlistened: sharded,
			Remote:          true,
		})
	})

	t.Run("resubscribes after a broken connection", func(t *testing.T) {
		if !sharded {
			t.Skip("the servers do not support sharded pub/sub (Redis 7.0 or later)")
		}
		const name = "resubscribe"
		node, err := newClusterRedis(t, addrs).MasterForKey(ctx, lock.DefaultPrefix+"{"+name+"}")
		require.NoError(t, err)
		holder := newClusterLockClient(t, addrs)
		contended, events := onContended()
		waiter := newClusterLockClient(t, addrs, lock.WithPollInterval(time.Minute), events)
		l, err := holder.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		stats.grants.Add(1)
		done := testenv.AcquireLater(ctx, waiter, name, lock.Options{Wait: true, MaxDuration: 20 * time.Second})
		awaitContended(t, ctx, contended, done)
		chans, err := node.PubSubShardChannels(ctx, "*inbox:*").Result()
		require.NoError(t, err)
		require.Len(t, chans, 1, "the waiter's shard channel on the lock's node")

		// Break the subscription's connection: go-redis reconnects and
		// subscribes again, and the waiter looks again.
		killed, err := node.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
		require.NoError(t, err)
		require.Positive(t, killed, "pub/sub connections killed on %s", node.Options().Addr)
		require.True(t, waitFor(10*time.Second, func() bool {
			n, err := node.PubSubShardNumSub(ctx, chans[0]).Result()
			return err == nil && n[chans[0]] == 1
		}), "the waiter's Client subscribes to %s again", chans[0])

		took := releaseToWaiter(t, ctx, l, done, "the resubscribed channel")
		t.Logf("killed %d pub/sub connection(s); the waiter acquired %v after the release (poll interval 1m)", killed, took.Round(time.Millisecond))
	})

	t.Run("bus cost of handoffs", func(t *testing.T) {
		if !sharded {
			t.Skip("the servers do not support sharded pub/sub (Redis 7.0 or later)")
		}
		const grants = 200
		s := handOff(t, ctx, addrs, "cost-sharded", grants)
		b := handOff(t, ctx, addrs, "cost-broadcast", grants, lock.ShardedPubSub(false))
		figures("cluster nodes=%d grants=%d handoffs: sharded %d (SPUBLISH), broadcast %d (PUBLISH); "+
			"bus publish messages: sharded %d (publishshard %d), broadcast %d (publishshard %d)",
			len(addrs), grants, s.spublish, b.publish, s.busPublish, s.busShard, b.busPublish, b.busShard)

		expect(t, s.spublish >= grants/2, "sharded: %d SPUBLISH for %d grants: the lock was not handed over by messages", s.spublish, grants)
		expect(t, s.publish == 0, "sharded: %d PUBLISH; want none", s.publish)
		expect(t, s.busPublish == 0, "sharded: %d publish messages on the cluster bus for %d handoffs; want none", s.busPublish, s.spublish)
		expect(t, s.busShard == 0, "sharded: %d publishshard messages on the cluster bus without replicas; want none", s.busShard)

		expect(t, b.publish >= grants/2, "broadcast: %d PUBLISH for %d grants: the lock was not handed over by messages", b.publish, grants)
		expect(t, b.spublish == 0, "broadcast: %d SPUBLISH; want none", b.spublish)
		if rep := clusterServer(t, ctx, addrs); rep.Server == "valkey" && !strings.HasPrefix(rep.Version, "7.") {
			// Valkey 8 sends a publish message with a light header (its
			// type with a high bit set) to every node that takes one, and
			// CLUSTER INFO counts no such type: the bus shows nothing to
			// compare with.
			t.Logf("Valkey %s does not count its light publish messages in CLUSTER INFO: the bus counts are not checked", rep.Version)
			return
		}
		expect(t, b.busPublish == int64(len(addrs)-1)*b.publish,
			"broadcast: %d publish messages on the cluster bus for %d PUBLISH; want one to each other node (%d)",
			b.busPublish, b.publish, int64(len(addrs)-1)*b.publish)
	})
}

// handoffCost is what handOff measured, summed over the cluster's nodes.
type handoffCost struct {
	publish, spublish    int64 // PUBLISH and SPUBLISH calls (by the scripts)
	busPublish, busShard int64 // publish and publishshard messages sent on the cluster bus
}

// handOff takes the lock called name n times with goroutines of three
// Clients (their providers built with opts) that wait for it, each holding
// it a millisecond (exclusionRun, which checks the exclusion and the
// tokens), so that nearly every grant is a handoff to a waiter; it returns
// what the grants cost.
func handOff(t *testing.T, ctx context.Context, addrs []string, name string, n int64, opts ...lock.RedisOption) handoffCost {
	t.Helper()
	cs := make([]*lock.Client, 3)
	for i := range cs {
		cs[i] = testenv.NewClient(t, lock.NewRedisProvider(newClusterRedis(t, addrs), opts...), lock.WithPollInterval(5*time.Second))
	}
	before := clusterCost(t, ctx, addrs)
	var taken atomic.Int64
	got := exclusionRun(t, ctx, cs, 2, name, 10*time.Second, func() bool { return taken.Add(1) <= n })
	expect(t, got == n, "%d grants, want %d", got, n)
	after := clusterCost(t, ctx, addrs)
	return handoffCost{
		publish:    after.publish - before.publish,
		spublish:   after.spublish - before.spublish,
		busPublish: after.busPublish - before.busPublish,
		busShard:   after.busShard - before.busShard,
	}
}

// clusterCost reads, on every node, how many PUBLISH and SPUBLISH calls it
// ran (INFO commandstats, which counts the scripts' calls) and how many
// publish messages it sent on the cluster bus (CLUSTER INFO), and sums them.
func clusterCost(t *testing.T, ctx context.Context, addrs []string) handoffCost {
	t.Helper()
	var c handoffCost
	for _, addr := range addrs {
		rc := newRedis(t, addr)
		cmds, err := rc.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		bus, err := rc.ClusterInfo(ctx).Result()
		require.NoError(t, err)
		c.publish += infoCount(cmds, "cmdstat_publish:", "calls=")
		c.spublish += infoCount(cmds, "cmdstat_spublish:", "calls=")
		c.busPublish += infoCount(bus, "cluster_stats_messages_publish_sent:", "")
		c.busShard += infoCount(bus, "cluster_stats_messages_publishshard_sent:", "")
	}
	return c
}

// infoCount returns the number after field in the INFO line that starts
// with line, or 0 without such a line (Redis leaves out what is zero).
func infoCount(info, line, field string) int64 {
	for _, l := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), line)
		if !ok {
			continue
		}
		if field != "" {
			i := strings.Index(rest, field)
			if i < 0 {
				return 0
			}
			rest = rest[i+len(field):]
		}
		if j := strings.IndexByte(rest, ','); j >= 0 {
			rest = rest[:j]
		}
		n, _ := strconv.ParseInt(rest, 10, 64)
		return n
	}
	return 0
}

// clusterSharded reports whether every node of the cluster knows SPUBLISH
// (Redis 7.0 or later), as the provider finds out.
func clusterSharded(t *testing.T, ctx context.Context, addrs []string) bool {
	t.Helper()
	for _, addr := range addrs {
		res, err := newRedis(t, addr).Do(ctx, "command", "info", "spublish").Slice()
		require.NoError(t, err)
		if len(res) == 0 || res[0] == nil {
			return false
		}
	}
	return true
}
