package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

// redisCLI is the redis-cli on PATH, used to create the cluster; without
// one the test joins the nodes and assigns the slots itself.
func redisCLI() (string, bool) {
	path, err := exec.LookPath("redis-cli")
	return path, err == nil
}

const (
	clusterNodes = 3
	clusterSlots = 16384
)

// TestRedisCluster runs the Redis provider against a real Redis Cluster of
// three masters: locks whose keys live on different nodes, fencing tokens,
// ErrHeld, the wake-up of a waiter by the release script's message (an
// SPUBLISH on a shard channel in the lock's slot, which only that slot's
// node handles, on Redis 7.0 or later; before, a PUBLISH, which Redis
// Cluster forwards to every node), a Fair wait queue across Clients, and a
// short mutual-exclusion run.
func TestRedisCluster(t *testing.T) {
	addrs := startCluster(t)
	ctx := ctxTimeout(t, 25*time.Second)

	// A plain ClusterClient for inspection.
	inspect := newClusterRedis(t, addrs)
	require.NoError(t, inspect.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}))

	// nodeOf returns the address of the master that holds the keys of the lock
	// called name (under the default prefix).
	nodeOf := func(name string) string {
		t.Helper()
		c, err := inspect.MasterForKey(ctx, lock.DefaultPrefix+"{"+name+"}")
		require.NoError(t, err)
		return c.Options().Addr
	}
	// namesOnNodes returns one lock name starting with base for each master,
	// by master address.
	namesOnNodes := func(base string) map[string]string {
		t.Helper()
		byNode := make(map[string]string)
		for i := 0; len(byNode) < clusterNodes && i < 10000; i++ {
			name := base + "-" + strconv.Itoa(i)
			if n := nodeOf(name); byNode[n] == "" {
				byNode[n] = name
			}
		}
		require.Len(t, byNode, clusterNodes, "lock names on every master")
		return byNode
	}

	t.Run("names on every node", func(t *testing.T) {
		a := newClusterLockClient(t, addrs)
		b := newClusterLockClient(t, addrs)
		direct := make(map[string]*redis.Client)
		for _, addr := range addrs {
			direct[addr] = newRedis(t, addr)
		}
		for node, name := range namesOnNodes("spread") {
			rk := lock.DefaultPrefix + "{" + name + "}"
			var last uint64
			for round := range 3 {
				l, err := a.Acquire(ctx, name, lock.Options{Lease: 5 * time.Second})
				require.NoError(t, err, "acquire %q (node %s) round %d", name, node, round)
				stats.grants.Add(1)
				expect(t, l.Token() > last, "%q: token %d after %d: tokens must strictly increase", name, l.Token(), last)
				last = l.Token()

				// The record is on the node the slot map says; the others
				// redirect there.
				for _, addr := range addrs {
					v, err := direct[addr].Get(ctx, rk).Result()
					if addr == node {
						require.NoError(t, err, "%q: record %s on its master %s", name, rk, addr)
						expect(t, recordOwner(v) == l.Owner(), "%q: record %q, holder %s", name, v, l.Owner())
					} else {
						expect(t, err != nil && strings.HasPrefix(err.Error(), "MOVED ") && strings.HasSuffix(err.Error(), " "+node),
							"%q: GET %s on %s: %q, %v; want MOVED to %s", name, rk, addr, v, err, node)
					}
				}

				// Held: a second attempt without Wait, on another Client, fails.
				l2, err := b.Acquire(ctx, name, lock.Options{})
				expect(t, l2 == nil && errors.Is(err, lock.ErrHeld) && errors.Is(err, lock.ErrNotAcquired),
					"%q: second acquisition while held: lock %v, err %v; want ErrHeld", name, l2, err)
				if l2 != nil {
					_ = l2.Release(ctx)
				}

				require.NoError(t, l.Release(ctx), "release %q", name)
				n, err := inspect.Exists(ctx, rk).Result()
				require.NoError(t, err)
				expect(t, n == 0, "%q: record still there after release", name)
			}
			t.Logf("%q on %s: last token %d", name, node, last)
		}
	})

	t.Run("release wakes a waiter through pub/sub", func(t *testing.T) {
		holder := newClusterLockClient(t, addrs)
		contended, events := onContended()
		waiter := newClusterLockClient(t, addrs, lock.WithPollInterval(10*time.Second), events)

		// Subscribe the waiter: a first wait, cut short, makes the Client
		// listen on its inbox: with sharded pub/sub, on the shard channel of
		// the warm-up lock's slot, on that lock's node (before Redis 7.0, on
		// the inbox channel, on any node); the subscription stays.
		l, err := holder.Acquire(ctx, "wake-warmup", lock.Options{})
		require.NoError(t, err)
		_, err = waiter.Acquire(ctx, "wake-warmup", lock.Options{Wait: true, MaxDuration: 300 * time.Millisecond})
		require.ErrorIs(t, err, lock.ErrTimeout)
		require.NoError(t, l.Release(ctx))
		drain(contended)

		// The subscription is on one node; the lock must live on another:
		// with sharded pub/sub the waiter's first Queue there subscribes it
		// on that node (SSUBSCRIBE) and the release's SPUBLISH reaches it
		// there; with PUBLISH the announcement crosses the cluster bus.
		sharded := clusterSharded(t, ctx, addrs)
		subscribed := func(addr string) []string {
			t.Helper()
			rc := newRedis(t, addr)
			var chans []string
			var err error
			if sharded {
				chans, err = rc.PubSubShardChannels(ctx, "*"+lock.DefaultPrefix+"inbox:*").Result()
			} else {
				chans, err = rc.PubSubChannels(ctx, lock.DefaultPrefix+"inbox:*").Result()
			}
			require.NoError(t, err)
			return chans
		}
		subNode := ""
		for _, addr := range addrs {
			if len(subscribed(addr)) > 0 {
				subNode = addr
			}
		}
		require.NotEmpty(t, subNode, "no node has a subscriber of an inbox channel")
		if sharded {
			expect(t, subNode == nodeOf("wake-warmup"), "the shard channel is on %s, the warm-up lock on %s", subNode, nodeOf("wake-warmup"))
		}
		name := ""
		for node, n := range namesOnNodes("wake") {
			if node != subNode {
				name = n
				break
			}
		}
		t.Logf("waiter subscribed on %s; lock %q lives on %s (sharded pub/sub: %v)", subNode, name, nodeOf(name), sharded)

		checkHandedOver(t, ctx, holder, waiter, name, contended)
		if sharded {
			chans := subscribed(nodeOf(name))
			expect(t, len(chans) == 1, "shard channels of the waiter's inbox on the lock's node %s: %v; want one", nodeOf(name), chans)
			if len(chans) == 1 {
				chSlot, err := inspect.ClusterKeySlot(ctx, chans[0]).Result()
				require.NoError(t, err)
				keySlot, err := inspect.ClusterKeySlot(ctx, lock.DefaultPrefix+"{"+name+"}").Result()
				require.NoError(t, err)
				expect(t, chSlot == keySlot, "shard channel %s in slot %d, the lock's record in slot %d", chans[0], chSlot, keySlot)
			}
			plain, err := newRedis(t, nodeOf(name)).PubSubChannels(ctx, "*").Result()
			require.NoError(t, err)
			expect(t, len(plain) == 0, "with sharded pub/sub nothing subscribes to plain channels; found %v", plain)
		}
	})

	t.Run("fair queue across clients", func(t *testing.T) {
		const name = "fair"
		holder := newClusterLockClient(t, addrs)
		fair := lock.Options{Wait: true, Fair: true, MaxDuration: 15 * time.Second}
		l, err := holder.Acquire(ctx, name, lock.Options{Fair: true})
		require.NoError(t, err)
		stats.grants.Add(1)
		t.Logf("%q lives on %s", name, nodeOf(name))

		var mu sync.Mutex
		var order []string
		var tokens []uint64
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for _, who := range []string{"first", "second"} {
			contended, events := onContended()
			c := newClusterLockClient(t, addrs, events)
			wg.Add(1)
			go func() {
				defer wg.Done()
				wl, err := c.Acquire(ctx, name, fair)
				if err != nil {
					errs <- fmt.Errorf("%s waiter: %w", who, err)
					return
				}
				stats.grants.Add(1)
				mu.Lock()
				order = append(order, who)
				tokens = append(tokens, wl.Token())
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
				if err := wl.Release(ctx); err != nil {
					errs <- fmt.Errorf("%s waiter release: %w", who, err)
				}
			}()
			// It has joined the provider's queue before the next one starts.
			select {
			case <-contended:
			case <-ctx.Done():
				t.Fatalf("the %s waiter never found the lock held", who)
			}
		}
		n, err := inspect.LLen(ctx, lock.DefaultPrefix+"{"+name+"}:q").Result()
		require.NoError(t, err)
		expect(t, n == 2, "%d owners in the wait queue, want 2", n)

		require.NoError(t, l.Release(ctx))
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		expect(t, strings.Join(order, ",") == "first,second", "grant order %v, want first,second", order)
		if len(tokens) == 2 {
			expect(t, l.Token() < tokens[0] && tokens[0] < tokens[1], "tokens %d then %v: not increasing", l.Token(), tokens)
		}
	})

	t.Run("mutual exclusion", func(t *testing.T) {
		const (
			name       = "mutex"
			clients    = 3
			goroutines = 3
		)
		t.Logf("%q lives on %s", name, nodeOf(name))
		stop := time.Now().Add(2 * time.Second)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cs := make([]*lock.Client, clients)
		for i := range cs {
			cs[i] = newClusterLockClient(t, addrs)
		}
		n := exclusionRun(t, rctx, cs, goroutines, name, 8*time.Second, func() bool { return time.Now().Before(stop) })
		expect(t, n > 0, "no critical section ran")
	})
}

// drain takes what ch holds.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// newClusterRedis returns a ClusterClient of the cluster, closed at the end of
// the test.
func newClusterRedis(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	rc := redis.NewClusterClient(clusterOptions(addrs))
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// clusterOptions are the options of the tests' Cluster clients of addrs.
func clusterOptions(addrs []string) *redis.ClusterOptions {
	return universalOptions(addrs...).Cluster()
}

// newClusterLockClient returns a lock Client on a Redis provider over a
// ClusterClient of its own; both are closed at the end of the test.
func newClusterLockClient(t testing.TB, addrs []string, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	return newClient(t, newClusterRedis(t, addrs), opts...)
}

// clusterNode is one Redis server process of the test cluster.
type clusterNode struct {
	addr string
	proc *servers.Proc
}

// clusterServer returns what CheckServer reports of the cluster at addrs:
// the server's name and version, which some checks depend on.
func clusterServer(t testing.TB, ctx context.Context, addrs []string) lock.ServerReport {
	t.Helper()
	rep, err := lock.NewRedisProvider(newClusterRedis(t, addrs)).CheckServer(ctx)
	require.NoError(t, err)
	return rep
}

// startCluster starts a Redis Cluster of three masters without replicas on
// loopback ports, assigns every slot, waits until every node says
// cluster_state:ok, and returns the nodes' addresses. Everything is stopped
// at the end of the test.
func startCluster(t *testing.T) []string {
	t.Helper()
	bin := faults.RequireRedis(t)
	nodes := make([]*clusterNode, clusterNodes)
	addrs := make([]string, clusterNodes)
	for i := range nodes {
		nodes[i] = startClusterNode(t, bin, i)
		addrs[i] = nodes[i].addr
	}
	logs := func() string {
		var b strings.Builder
		for _, n := range nodes {
			fmt.Fprintf(&b, "--- %s:\n%s\n", n.addr, n.proc.Log())
		}
		return b.String()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if cli, ok := redisCLI(); ok {
		args := append([]string{"--cluster", "create"}, addrs...)
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		require.NoError(t, err, "redis-cli --cluster create:\n%s\n%s", out, logs())
		t.Logf("cluster created with %s", cli)
	} else {
		meetCluster(t, ctx, addrs)
		t.Logf("cluster created with CLUSTER MEET and CLUSTER ADDSLOTSRANGE")
	}

	// Wait until every node has the whole slot map.
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
		for {
			info, err := rc.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = rc.Close()
				t.Fatalf("node %s not ok within 10s: %v\n%s\n%s", addr, err, info, logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = rc.Close()
	}
	return addrs
}

// meetCluster joins the nodes with CLUSTER MEET and gives each a third of the
// slots with CLUSTER ADDSLOTSRANGE.
func meetCluster(t *testing.T, ctx context.Context, addrs []string) {
	t.Helper()
	clients := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		clients[i] = newRedis(t, addr)
	}
	per := clusterSlots / len(addrs)
	for i, rc := range clients {
		first, last := i*per, (i+1)*per-1
		if i == len(addrs)-1 {
			last = clusterSlots - 1
		}
		require.NoError(t, rc.ClusterAddSlotsRange(ctx, first, last).Err(), "CLUSTER ADDSLOTSRANGE %d %d on %s", first, last, addrs[i])
	}
	for _, addr := range addrs[1:] {
		host, port, _ := net.SplitHostPort(addr)
		// The bus port is not the default (port+10000): tell MEET.
		busPort := clusterBusPort(t, ctx, addr)
		require.NoError(t, clients[0].Do(ctx, "CLUSTER", "MEET", host, port, busPort).Err(), "CLUSTER MEET %s", addr)
	}
}

// clusterBusPort returns the cluster bus port of the node at addr.
func clusterBusPort(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	m, err := newRedis(t, addr).ConfigGet(ctx, "cluster-port").Result()
	require.NoError(t, err)
	return m["cluster-port"]
}

// startClusterNode starts one cluster-enabled Redis server on free loopback
// ports (client and bus) and waits until it answers PING.
func startClusterNode(t *testing.T, bin string, i int) *clusterNode {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for range 5 {
		port, err := faults.FreePort()
		require.NoError(t, err)
		busPort, err := faults.FreePort()
		require.NoError(t, err)
		if busPort == port {
			continue
		}
		p, err := servers.StartRedis(bin, port, dir,
			"--cluster-port", strconv.Itoa(busPort),
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("%s/nodes-%d.conf", dir, i),
			"--cluster-node-timeout", "5000")
		if lastErr = err; err == nil {
			t.Cleanup(func() { p.Stop(syscall.SIGKILL, time.Minute) })
			return &clusterNode{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), proc: p}
		}
	}
	t.Fatalf("start cluster node %d: %v", i, lastErr)
	return nil
}
