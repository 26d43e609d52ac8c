package faults_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/locktest"
)

// The history checker under the faults this suite can make (issue 40):
// locktest's Workload (locks, semaphore holds, an election and its
// Observe, fenced writes; one Client stalled, one dead) runs on real
// redis-server processes while the test drops every connection, restarts
// the server empty, fails a Sentinel primary over, or moves a Cluster hash
// slot; every operation is recorded and the history checked. The fenced
// resource is a server of its own (a RedisFence), which no fault touches.

// historyWorkload is the Workload of these tests: paced, so that it runs
// through the faults with a small history, until Stop.
func historyWorkload(t *testing.T, newRC func(t testing.TB) redis.UniversalClient) locktest.Workload {
	resource := faults.StartRedis(t)
	return locktest.Workload{
		New: func(t testing.TB) lock.Provider {
			return lock.NewRedisProvider(newRC(t))
		},
		Fence:         locktest.RedisFence(newRedis(t, resource.Addr)),
		Faults:        true,
		Rounds:        1000, // bounded by Stop
		Pace:          100 * time.Millisecond,
		Lease:         time.Second,
		Prefix:        "history:",
		ClientOptions: []lock.ClientOption{lock.WithReleaseTimeout(time.Second)},
	}
}

// waitGrants waits until the run has been granted n more locks, holds and
// terms and at least least has passed, for up to d.
func waitGrants(r *locktest.Running, n int64, least, d time.Duration) {
	want, start := r.Grants()+n, time.Now()
	for end := start.Add(d); (r.Grants() < want || time.Since(start) < least) && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
}

// checked stops the run, checks its history, and prints the result's line
// with the suite's figures.
func checked(t *testing.T, label string, r *locktest.Running) locktest.Result {
	t.Helper()
	h := r.Stop()
	stats.grants.Add(r.Grants())
	res := h.Check(os.Getenv("LOCKTEST_HISTORY_DIR"), t.Name())
	figures("history %s: %s", label, res)
	return res
}

// TestHistoryRedisRestart: every connection dropped (a proxy cuts them),
// then the server killed and restarted empty on the same port. A record
// lost with the server is an expiry the models allow; a token granted
// after the restart must still be above every earlier one, a renewal or
// release after it must not succeed for a record that is gone.
func TestHistoryRedisRestart(t *testing.T) {
	srv := faults.StartRedis(t)
	proxy, err := faults.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	w := historyWorkload(t, func(t testing.TB) redis.UniversalClient { return newRedis(t, proxy.Addr()) })
	r := w.Start(t)
	waitGrants(r, 10, time.Second, 10*time.Second)
	fault(t, "drop every connection to Redis")
	t.Logf("cut %d connections", proxy.Cut())
	waitGrants(r, 10, time.Second, 10*time.Second)
	require.NoError(t, srv.Kill())
	fault(t, "kill Redis under the run")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, srv.Start(), "restart Redis")
	fault(t, "restart Redis empty on the same port")
	waitGrants(r, 15, 3*time.Second, 15*time.Second)
	res := checked(t, "restart", r)
	expect(t, len(res.Illegal) == 0, "the history of a run through a restart is not linearizable: %s", res)
}

// TestHistoryClusterSlotMove: the hash slot of one of the run's locks moves
// to another node (its keys migrated, its fencing counter with them) while
// the run takes it.
func TestHistoryClusterSlotMove(t *testing.T) {
	addrs := startCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	cc := newClusterRedis(t, addrs)
	w := historyWorkload(t, func(t testing.TB) redis.UniversalClient { return newClusterRedis(t, addrs) })
	slot, src, dst := slotMove(t, ctx, cc, addrs, keyOf(w.Prefix+"lock0"))
	r := w.Start(t)
	waitGrants(r, 10, time.Second, 10*time.Second)
	fault(t, "move the slot of a lock of the run to another node")
	migrated := moveSlot(t, ctx, addrs, slot, src, dst, 20*time.Millisecond)
	t.Logf("slot %d moved from %s to %s (%d keys migrated)", slot, src, dst, migrated)
	waitGrants(r, 15, 3*time.Second, 15*time.Second)
	res := checked(t, "cluster-slot-move", r)
	expect(t, len(res.Illegal) == 0, "the history of a run through a slot move is not linearizable: %s", res)
}

// TestHistorySentinelFailover: the primary is cut off from its replicas
// (what it writes from then on is not replicated), killed 300ms later, and
// a replica promoted; the old primary comes back as a replica. docs/
// guarantees.md says that a failover after asynchronous replication can
// grant a lock again, tokens included: the checker's finding is printed
// with the figures, and a violation it finds must be of the kinds the
// docs name (a lock's, a counted name's or an Observe's order), never of
// the fenced resource (a server of its own) or of what a Client told.
func TestHistorySentinelFailover(t *testing.T) {
	s := faults.StartSentinel(t, faults.SentinelOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	w := historyWorkload(t, func(t testing.TB) redis.UniversalClient {
		rc := redis.NewUniversalClient(sentinelOptions(s.Addrs))
		t.Cleanup(func() { _ = rc.Close() })
		return rc
	})
	r := w.Start(t)
	waitGrants(r, 10, time.Second, 10*time.Second)
	old := s.Nodes[0]
	require.NoError(t, s.CutReplication(ctx, old.Addr))
	fault(t, "cut the primary off from its replicas")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, old.Kill())
	fault(t, "kill the primary")
	promoted, _, err := s.WaitPromotion(ctx, old.Addr)
	require.NoError(t, err, "a replica is promoted")
	require.NoError(t, s.Rejoin(ctx, old, promoted), "the old primary comes back as a replica")
	waitGrants(r, 15, 3*time.Second, 20*time.Second)
	res := checked(t, "sentinel-failover", r)
	if len(res.Illegal) == 0 {
		t.Logf("no violation in this run (docs/guarantees.md says a failover after asynchronous replication can give a lock two holders and repeat tokens; this one did not)")
		return
	}
	doc, err := os.ReadFile("../docs/guarantees.md")
	require.NoError(t, err)
	for _, said := range []string{"the new primary can grant the same lock again", "even tokens can repeat"} {
		expect(t, strings.Contains(strings.Join(strings.Fields(string(doc)), " "), said),
			"the checker found %s, and docs/guarantees.md no longer says %q", res, said)
	}
	for _, p := range res.Illegal {
		expect(t, strings.HasPrefix(p, "lock ") || strings.HasPrefix(p, "claims ") || strings.HasPrefix(p, "observe "),
			"after the failover the checker found %q not linearizable, which the docs do not allow: %s", p, res)
	}
	t.Logf("as docs/guarantees.md says, the failover broke the order of: %s (visualization %s)", strings.Join(res.Illegal, "; "), res.File)
}
