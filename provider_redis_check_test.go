package lock_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

// TestCheckServerReal checks the tests' Redis, changing nothing on it: the
// report carries the server's mode, policy and AOF setting (its name and
// version: TestCheckServerNamesItself).
func TestCheckServerReal(t *testing.T) {
	rc := realRedis(t)
	ctx := ctxTimeout(t, 10*time.Second)
	rep, err := lock.NewRedisProvider(rc).CheckServer(ctx)
	require.NoError(t, err)
	t.Logf("report: %+v", rep)

	assert.Equal(t, "standalone", rep.Mode)
	if policy, err := rc.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
		assert.Equal(t, policy["maxmemory-policy"], rep.MaxmemoryPolicy, "the server's maxmemory-policy")
	}
	text, err := rc.Info(ctx, "persistence").Result()
	require.NoError(t, err)
	assert.Equal(t, infoField(text, "aof_enabled") == "1", rep.AOF, "the server's aof_enabled")
	assert.Nil(t, rep.Nodes, "no per-node reports for a single server")
}

// TestCheckServerNamesItself checks a server of each binary the tests may
// start (LOCK_REDIS_SERVER: redis-server, valkey-server): the report names
// the server and its own version as the binary's --version does ("Valkey
// server v=8.0.1"), and its mode. Before, Valkey 8 was reported as Mode
// "unknown", Version "7.2.4": its INFO says server_mode and valkey_version
// beside a redis_version of compatibility (issue 39).
func TestCheckServerNamesItself(t *testing.T) {
	for _, bin := range []string{"redis-server", "valkey-server"} {
		t.Run(bin, func(t *testing.T) {
			t.Setenv(servers.EnvRedisServer, bin) // the one setting every started server follows
			srv := faults.StartRedis(t)
			out, err := exec.Command(faults.RequireRedis(t), "--version").Output()
			require.NoError(t, err)
			// "Redis server v=7.0.15 sha=...", "Valkey server v=8.0.1 sha=..."
			name, rest, _ := strings.Cut(string(out), " server v=")
			version, _, _ := strings.Cut(rest, " ")
			require.NotEmpty(t, version, "the version in %q", out)

			rep, err := lock.NewRedisProvider(newRedisClient(t, srv.Addr)).CheckServer(ctxTimeout(t, 10*time.Second))
			require.NoError(t, err)
			assert.Equal(t, strings.ToLower(name), rep.Server, "the server's name")
			assert.Equal(t, version, rep.Version, "the server's own version")
			assert.Equal(t, "standalone", rep.Mode)
			for _, w := range rep.Warnings {
				assert.NotContains(t, w, "version", "a supported server")
			}
		})
	}
}

// TestCheckServerEvictingNoPersistence checks a server that can evict lock
// records and forgets them on restart: both are warned about.
func TestCheckServerEvictingNoPersistence(t *testing.T) {
	addr := faults.StartRedis(t, "--maxmemory-policy", "volatile-lru", "--maxmemory", "64mb",
		"--save", "", "--appendonly", "no").Addr
	rep, err := lock.NewRedisProvider(newRedisClient(t, addr)).CheckServer(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	t.Logf("warnings: %q", rep.Warnings)

	assert.Equal(t, addr, rep.Addr)
	assert.Equal(t, "standalone", rep.Mode)
	assert.Equal(t, "volatile-lru", rep.MaxmemoryPolicy)
	assert.Equal(t, int64(64<<20), rep.Maxmemory)
	assert.False(t, rep.AOF, "appendonly no")
	assert.Equal(t, "", rep.Save, `save ""`)
	require.Len(t, rep.Warnings, 2, "one warning for eviction, one for persistence")
	assert.Contains(t, rep.Warnings[0], "maxmemory-policy is volatile-lru, not noeviction")
	assert.Contains(t, rep.Warnings[0], "evict a lock record")
	assert.Contains(t, rep.Warnings[1], "AOF is off and no RDB snapshots")
	assert.Contains(t, rep.Warnings[1], "a restart forgets the locks")
}

// TestCheckServerSafe checks a server configured as the README asks:
// noeviction and AOF every second. Nothing is warned about.
func TestCheckServerSafe(t *testing.T) {
	addr := faults.StartRedis(t, "--maxmemory-policy", "noeviction", "--maxmemory", "64mb",
		"--appendonly", "yes", "--appendfsync", "everysec").Addr
	rep, err := lock.NewRedisProvider(newRedisClient(t, addr)).CheckServer(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, "noeviction", rep.MaxmemoryPolicy)
	assert.True(t, rep.AOF, "appendonly yes")
	assert.Equal(t, "everysec", rep.Appendfsync)
	assert.Empty(t, rep.Warnings, "a server with noeviction and AOF everysec needs no warning")
}

// TestCheckServerConfigRefused checks a server without CONFIG (as managed
// Redis services rename it away): the settings only CONFIG tells are
// reported unknown, and the check does not fail.
func TestCheckServerConfigRefused(t *testing.T) {
	addr := faults.StartRedis(t, "--rename-command", "CONFIG", "", "--appendonly", "no").Addr
	rep, err := lock.NewRedisProvider(newRedisClient(t, addr)).CheckServer(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err, "a refused CONFIG GET is not an error")
	assert.Equal(t, lock.UnknownSetting, rep.Save)
	assert.Equal(t, lock.UnknownSetting, rep.Appendfsync)
	assert.Equal(t, "noeviction", rep.MaxmemoryPolicy, "read from INFO memory, which stays allowed")
	require.NotEmpty(t, rep.Warnings)
	assert.Contains(t, rep.Warnings[len(rep.Warnings)-1], "the RDB schedule could not be read")
}

// TestCheckServerCluster checks a one-master Cluster through a ClusterClient:
// the master is reported in Nodes and its warnings name it.
func TestCheckServerCluster(t *testing.T) {
	testenv.SkipShort(t, "a Cluster test of 2 s (starts a Cluster node)")
	addr := faults.StartRedis(t, "--cluster-enabled", "yes", "--cluster-announce-ip", "127.0.0.1",
		"--maxmemory-policy", "allkeys-lru",
		"--save", "", "--appendonly", "no").Addr
	ctx := ctxTimeout(t, 20*time.Second)
	direct := newRedisClient(t, addr)
	if err := direct.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		slots := make([]any, 0, 16386)
		slots = append(slots, "CLUSTER", "ADDSLOTS")
		for i := range 16384 {
			slots = append(slots, i)
		}
		require.NoError(t, direct.Do(ctx, slots...).Err(), "assign every slot to the one master")
	}
	require.Eventually(t, func() bool {
		text, err := direct.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(text, "cluster_state:ok")
	}, 10*time.Second, 20*time.Millisecond, "the cluster comes up")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	t.Cleanup(func() { _ = cc.Close() })
	rep, err := lock.NewRedisProvider(cc).CheckServer(ctx)
	require.NoError(t, err)
	t.Logf("warnings: %q", rep.Warnings)
	assert.Equal(t, "cluster", rep.Mode)
	require.Len(t, rep.Nodes, 1, "one report per master")
	assert.Equal(t, addr, rep.Nodes[0].Addr)
	require.Len(t, rep.Warnings, 2, "eviction and persistence")
	assert.True(t, strings.HasPrefix(rep.Warnings[0], addr+": maxmemory-policy is allkeys-lru"),
		"the warning names the node: %q", rep.Warnings[0])

	// A single-node client of a cluster node is told to use a ClusterClient.
	rep, err = lock.NewRedisProvider(direct).CheckServer(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Warnings)
	assert.Contains(t, rep.Warnings[len(rep.Warnings)-1], "use a ClusterClient")
}

// infoField returns one field of an INFO reply.
func infoField(text, name string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func newRedisClient(t testing.TB, addr string) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}
