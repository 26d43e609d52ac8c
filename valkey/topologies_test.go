package valkey_test

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

	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/locktest"
	lockvalkey "github.com/seed05627090/lock/valkey"
)

// TestSentinel runs the conformance suite through valkey-go Sentinel clients,
// on a master, a replica and a sentinel started here.
func TestSentinel(t *testing.T) {
	testenv.SkipShort(t, "the suite on a Sentinel deployment (about 30 s)")
	s := faults.StartSentinel(t, faults.SentinelOptions{Replicas: 1, Sentinels: 1})
	newSentinel := func(t testing.TB) valkey.Client {
		return dial(t, valkey.ClientOption{InitAddress: s.Addrs, Sentinel: valkey.SentinelOption{MasterSet: faults.MasterName}})
	}
	locktest.Run(t, locktest.Backend{
		New:             func(t testing.TB) lock.Provider { return lockvalkey.NewProvider(newSentinel(t)) },
		Fence:           func(t testing.TB) locktest.Fence { return redisFence{newSentinel(t)} },
		Expires:         true,
		SkipsUnlistened: true,
		Remote:          true,
	})
}

// TestCluster runs the conformance suite through valkey-go Cluster clients,
// on a Redis Cluster of three primaries started here: with sharded pub/sub
// on Redis 7.0 or later and Valkey.
func TestCluster(t *testing.T) {
	testenv.SkipShort(t, "the suite on a Redis Cluster (about 30 s)")
	addrs := startCluster(t)
	newCluster := func(t testing.TB) valkey.Client { return dial(t, valkey.ClientOption{InitAddress: addrs}) }
	ctx := ctxTimeout(t, 10*time.Second)
	rep, err := lockvalkey.NewProvider(newCluster(t)).CheckServer(ctx)
	require.NoError(t, err)
	t.Logf("servers: %s %s", rep.Server, rep.Version)
	locktest.Run(t, locktest.Backend{
		New:     func(t testing.TB) lock.Provider { return lockvalkey.NewProvider(newCluster(t)) },
		Fence:   func(t testing.TB) locktest.Fence { return redisFence{newCluster(t)} },
		Expires: true,
		// SPUBLISH (Redis 7.0 or later, Valkey) counts the subscribers of
		// its shard channel exactly.
		SkipsUnlistened: rep.Server == "valkey" || !strings.HasPrefix(rep.Version, "6."),
		Remote:          true,
	})

	// A pipeline of commands in two slots and one without a key, which
	// valkey-go alone would refuse with a panic, is sent; every command has
	// its reply.
	t.Run("KeyedAndKeylessCommands", func(t *testing.T) {
		ctx := ctxTimeout(t, 10*time.Second)
		cmds := []*lock.RedisCommand{
			{Args: []any{"set", "{a}" + uniqueName(t), "1"}, Key: 1, Keys: 1},
			{Args: []any{"set", "{b}" + uniqueName(t), "2"}, Key: 1, Keys: 1},
			{Args: []any{"ping"}},
		}
		lockvalkey.NewDriver(newCluster(t)).Exec(ctx, cmds)
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
	rc := dial(t, valkey.ClientOption{InitAddress: []string{replica.Addr}})
	host, port, _ := net.SplitHostPort(primary.Addr)
	require.NoError(t, rc.Do(ctx, rc.B().Replicaof().Host(host).Port(mustAtoi(t, port)).Build()).Error())
	require.Eventually(t, func() bool {
		info, err := rc.Do(ctx, rc.B().Info().Section("replication").Build()).ToString()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 20*time.Millisecond, "the replica follows the primary")

	pc := dial(t, valkey.ClientOption{InitAddress: []string{primary.Addr}})
	one := lockvalkey.NewProvider(pc, lock.WaitForReplicas(1, time.Second))
	rec, err := one.Acquire(ctx, "replicated", testenv.NewOwner(), time.Minute)
	require.NoError(t, err, "a grant that the replica acknowledges")
	require.NotZero(t, rec.Token)
	two := lockvalkey.NewProvider(pc, lock.WaitForReplicas(2, 100*time.Millisecond))
	_, err = two.Acquire(ctx, "unreplicated", testenv.NewOwner(), time.Minute)
	require.ErrorIs(t, err, lock.ErrNotReplicated, "a grant that only one of two replicas can acknowledge")
}

func mustAtoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

// dial returns a valkey-go client with o, closed at the end of the test.
func dial(t testing.TB, o valkey.ClientOption) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(o)
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
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skipf("no redis-cli to create the Cluster with: %v", err)
	}
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
		c := dial(t, valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
		require.Eventually(t, func() bool {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}, 15*time.Second, 50*time.Millisecond, "node %s has the whole map of slots", addr)
	}
	return addrs
}
