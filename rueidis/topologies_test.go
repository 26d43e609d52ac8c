package rueidis_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/locktest"
	"github.com/seed05627090/lock/redisdriver"
	lockrueidis "github.com/seed05627090/lock/rueidis"
)

// TestSentinel runs the conformance suite through rueidis Sentinel clients,
// on a master, a replica and a sentinel started here.
func TestSentinel(t *testing.T) {
	testenv.SkipShort(t, "the suite on a Sentinel deployment (about 30 s)")
	s := faults.StartSentinel(t, faults.SentinelOptions{Replicas: 1, Sentinels: 1})
	newSentinel := func(t testing.TB) rueidis.Client {
		return dial(t, rueidis.ClientOption{InitAddress: s.Addrs, Sentinel: rueidis.SentinelOption{MasterSet: faults.MasterName}})
	}
	locktest.Run(t, locktest.Backend{
		New:             func(t testing.TB) lock.Provider { return lockrueidis.NewProvider(newSentinel(t)) },
		Fence:           func(t testing.TB) locktest.Fence { return redisFence{newSentinel(t)} },
		Expires:         true,
		SkipsUnlistened: true,
		Remote:          true,
	})
}

// TestCluster runs the conformance suite through rueidis Cluster clients,
// on a Redis Cluster of three primaries started here: with sharded pub/sub
// on Redis 7.0 or later and Valkey.
func TestCluster(t *testing.T) {
	testenv.SkipShort(t, "the suite on a Redis Cluster (about 30 s)")
	addrs := startCluster(t)
	newCluster := func(t testing.TB) rueidis.Client { return dial(t, rueidis.ClientOption{InitAddress: addrs}) }
	ctx := ctxTimeout(t, 10*time.Second)
	rep, err := lockrueidis.NewProvider(newCluster(t)).CheckServer(ctx)
	require.NoError(t, err)
	t.Logf("servers: %s %s", rep.Server, rep.Version)
	locktest.Run(t, locktest.Backend{
		New:     func(t testing.TB) lock.Provider { return lockrueidis.NewProvider(newCluster(t)) },
		Fence:   func(t testing.TB) locktest.Fence { return redisFence{newCluster(t)} },
		Expires: true,
		// SPUBLISH (Redis 7.0 or later, Valkey) counts the subscribers of
		// its shard channel exactly.
		SkipsUnlistened: rep.Server == "valkey" || !strings.HasPrefix(rep.Version, "6."),
		Remote:          true,
	})

	// A pipeline of commands in two slots and one without a key, which
	// rueidis alone would refuse with a panic, is sent; every command has
	// its reply.
	t.Run("KeyedAndKeylessCommands", func(t *testing.T) {
		ctx := ctxTimeout(t, 10*time.Second)
		cmds := []*redisdriver.Command{
			{Args: []any{"set", "{a}" + uniqueName(t), "1"}, Key: 1, Keys: 1},
			{Args: []any{"set", "{b}" + uniqueName(t), "2"}, Key: 1, Keys: 1},
			{Args: []any{"ping"}},
		}
		lockrueidis.NewDriver(newCluster(t)).Exec(ctx, cmds)
		for _, cmd := range cmds {
			require.NoError(t, cmd.Err, "%v", cmd.Args)
		}
		require.Equal(t, []any{"OK", "OK", "PONG"}, []any{cmds[0].Reply, cmds[1].Reply, cmds[2].Reply})
	})
}

// TestWaitForReplicas: with WaitForReplicas, a grant counts once a replica
// acknowledged it (the script and WAIT go together to the key's primary),
// and fails with ErrNotReplicated when more replicas are asked for than
// there are.
func TestWaitForReplicas(t *testing.T) {
	primary := faults.StartRedis(t)
	replica := faults.StartRedis(t)
	ctx := ctxTimeout(t, 20*time.Second)
	rc := dial(t, rueidis.ClientOption{InitAddress: []string{replica.Addr}})
	host, port, _ := net.SplitHostPort(primary.Addr)
	require.NoError(t, rc.Do(ctx, rc.B().Replicaof().Host(host).Port(mustAtoi(t, port)).Build()).Error())
	require.Eventually(t, func() bool {
		info, err := rc.Do(ctx, rc.B().Info().Section("replication").Build()).ToString()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 20*time.Millisecond, "the replica follows the primary")

	pc := dial(t, rueidis.ClientOption{InitAddress: []string{primary.Addr}})
	one := lockrueidis.NewProvider(pc, lock.WaitForReplicas(1, time.Second))
	rec, err := one.Acquire(ctx, "replicated", testenv.NewOwner(), time.Minute)
	require.NoError(t, err, "a grant that the replica acknowledges")
	require.NotZero(t, rec.Token)
	two := lockrueidis.NewProvider(pc, lock.WaitForReplicas(2, 100*time.Millisecond))
	_, err = two.Acquire(ctx, "unreplicated", testenv.NewOwner(), time.Minute)
	require.ErrorIs(t, err, lock.ErrNotReplicated, "a grant that only one of two replicas can acknowledge")
}

func mustAtoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

// dial returns a rueidis client with o, closed at the end of the test.
func dial(t testing.TB, o rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// startCluster starts a Redis Cluster of three primaries without replicas
// on loopback ports, joined by redis-cli --cluster create, waits until
// every node says cluster_state:ok, and returns their addresses. The
// servers are stopped at the end of the test.
func startCluster(t *testing.T) []string {
	t.Helper()
	bin := faults.RequireRedis(t)
	cli := servers.RedisCLI(t)
	dir := t.TempDir()
	addrs := make([]string, 3)
	for i := range addrs {
		port, err := servers.FreePort()
		require.NoError(t, err)
		bus, err := servers.FreePort()
		require.NoError(t, err)
		p, err := servers.StartRedis(bin, port, dir, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", fmt.Sprintf("%s/nodes-%d.conf", dir, i), "--cluster-node-timeout", "5000")
		require.NoError(t, err)
		t.Cleanup(func() { p.Stop(syscall.SIGKILL, time.Minute) })
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create:\n%s", out)
	for _, addr := range addrs {
		c := dial(t, rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
		require.Eventually(t, func() bool {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}, 15*time.Second, 50*time.Millisecond, "node %s has the whole map of slots", addr)
	}
	return addrs
}

// TestClusterSlotMoveResubscribes moves the slot of a lock, while a waiter
// (polling once a minute) is queued for it, to another primary: Redis ends
// the waiter's shard subscription on the old node, the waiter looks again,
// and its provider subscribes on the new node (after the MOVED of an
// SSUBSCRIBE sent where the driver's map of slots still said, the driver
// loads the map again: Primaries), so that the release's SPUBLISH there
// hands it the lock at once.
func TestClusterSlotMoveResubscribes(t *testing.T) {
	testenv.SkipShort(t, "a Redis Cluster")
	addrs := startCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	newCluster := func(t testing.TB) rueidis.Client { return dial(t, rueidis.ClientOption{InitAddress: addrs}) }
	rep, err := lockrueidis.NewProvider(newCluster(t)).CheckServer(ctx)
	require.NoError(t, err)
	if rep.Server == "redis" && strings.HasPrefix(rep.Version, "6.") {
		t.Skip("no sharded pub/sub before Redis 7.0")
	}
	holder := newClient(t, lockrueidis.NewProvider(newCluster(t)))
	waiter := newClient(t, lockrueidis.NewProvider(newCluster(t)), lock.WithPollInterval(time.Minute))
	const name = "moving"
	key, _, _, err := lock.RedisKeys(lock.DefaultPrefix + "{" + name + "}")
	require.NoError(t, err)
	src, err := lockrueidis.NewDriver(newCluster(t)).PrimaryForKey(ctx, key)
	require.NoError(t, err)
	dst := addrs[0]
	if dst == src.Addr() {
		dst = addrs[1]
	}
	nodes := map[string]rueidis.Client{}
	for _, a := range addrs {
		nodes[a] = dial(t, rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true})
	}

	l, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	done := testenv.AcquireLater(ctx, waiter, name, lock.Options{Wait: true, MaxWait: 30 * time.Second})
	require.Eventually(t, func() bool {
		st, err := holder.Inspect(ctx, name)
		return err == nil && st.Waiters == 1
	}, 10*time.Second, 5*time.Millisecond, "the waiter queues")
	c := nodes[src.Addr()]
	chans, err := c.Do(ctx, c.B().PubsubShardchannels().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	require.Len(t, chans, 1, "the waiter's shard channel on %s", src.Addr())

	moveSlot(t, ctx, nodes, key, src.Addr(), dst)
	d := nodes[dst]
	require.Eventually(t, func() bool {
		n, err := d.Do(ctx, d.B().PubsubShardnumsub().Channel(chans[0]).Build()).AsIntMap()
		return err == nil && n[chans[0]] == 1
	}, 10*time.Second, 20*time.Millisecond, "the waiter subscribes to %s on %s, where the slot moved", chans[0], dst)

	released := time.Now()
	require.NoError(t, l.Release(ctx))
	r := <-done
	require.NoError(t, r.Err, "the waiter's acquisition")
	assert.Less(t, r.At.Sub(released), 5*time.Second, "the SPUBLISH on %s wakes the waiter (it polls once a minute)", dst)
	require.NoError(t, r.Lock.Release(ctx))
}

// moveSlot moves the slot of key, with its keys, from the primary at src to
// the one at dst: CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE, then
// SETSLOT NODE on every node.
func moveSlot(t *testing.T, ctx context.Context, nodes map[string]rueidis.Client, key, src, dst string) {
	t.Helper()
	slot, err := nodes[src].Do(ctx, nodes[src].B().ClusterKeyslot().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	ids := map[string]string{}
	for a, c := range nodes {
		id, err := c.Do(ctx, c.B().ClusterMyid().Build()).ToString()
		require.NoError(t, err)
		ids[a] = id
	}
	do := func(addr string, args ...string) {
		c := nodes[addr]
		err := c.Do(ctx, c.B().Arbitrary(args...).Build()).Error()
		require.NoError(t, err, "%v on %s", args, addr)
	}
	s := strconv.FormatInt(slot, 10)
	do(dst, "CLUSTER", "SETSLOT", s, "IMPORTING", ids[src])
	do(src, "CLUSTER", "SETSLOT", s, "MIGRATING", ids[dst])
	c := nodes[src]
	keys, err := c.Do(ctx, c.B().ClusterGetkeysinslot().Slot(slot).Count(1000).Build()).AsStrSlice()
	require.NoError(t, err)
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(dst)
		do(src, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)...)
	}
	for a := range nodes {
		do(a, "CLUSTER", "SETSLOT", s, "NODE", ids[dst])
	}
}
