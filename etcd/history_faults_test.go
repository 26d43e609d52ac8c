package etcd_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
)

// TestHistoryFaults runs locktest's Workload (locks, semaphore holds, an
// election and its Observe, writes through etcd.Fence; one Client stalled,
// one dead), paced, on a 3-member cluster while its leader is SIGKILLed and
// restarted, then SIGSTOPped for 3 election timeouts, and checks the
// history of every operation with the linearizability checker (issue 40):
// etcd is linearizable, so the history must be.
func TestHistoryFaults(t *testing.T) {
	testenv.SkipShort(t, "a fault test: starts 3 etcd processes")
	c := startCluster(t)
	ns := testNamespace()
	w := locktest.Workload{
		New: func(t testing.TB) lock.Provider {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := etcd.NewProvider(ctx, newFaultClient(t, c.endpoints...), etcd.WithNamespace(ns))
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return p
		},
		Fence:  etcdFence{newFaultClient(t, c.endpoints...), ns},
		Faults: true,
		Rounds: 1000, // bounded by Stop
		Pace:   100 * time.Millisecond,
		Lease:  2 * time.Second, // whole seconds on etcd
		Prefix: "history:",
	}
	r := w.Start(t)
	grants := func(n int64, least time.Duration) {
		want, start := r.Grants()+n, time.Now()
		for end := start.Add(30 * time.Second); (r.Grants() < want || time.Since(start) < least) && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	const stall = 3 * faultElection
	grants(10, time.Second)
	leader, err := c.leader()
	require.NoError(t, err)
	c.kill(leader)
	time.Sleep(stall)
	require.NoError(t, c.spawn(leader), "restarting member %d", leader)
	t.Logf("fault: member %d (the leader) killed and restarted", leader)
	grants(10, 2*time.Second)
	leader, err = c.leader()
	require.NoError(t, err)
	c.signal(leader, syscall.SIGSTOP)
	time.Sleep(stall)
	c.signal(leader, syscall.SIGCONT)
	t.Logf("fault: member %d (the leader) stopped for %v", leader, stall)
	grants(15, 3*time.Second)
	locktest.CheckHistory(t, r.Stop())
}
