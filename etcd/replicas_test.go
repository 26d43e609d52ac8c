package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/locktest"
)

// replicas returns n Clients, each on a provider with an etcd client of its
// own: n processes sharing one cluster.
func replicas(t *testing.T, ns string, n int, opts ...lock.ClientOption) []*lock.Client {
	cs := make([]*lock.Client, n)
	for i := range cs {
		cs[i] = newLockClient(t, newProvider(t, ns), opts...)
	}
	return cs
}

// Replicas that wait for one lock hold it one at a time: at most one holder
// at any instant, no update of an unprotected read-modify-write is lost,
// and each holder's token is greater than the last.
func TestReplicasMutualExclusion(t *testing.T) {
	ns := testNamespace()
	locktest.ReplicasHoldInTurn(t, ctxTimeout(t, 2*time.Minute), replicas(t, ns, 4), uniqueName(t), 3, 10)
}

// A waiter is woken by the grant its watch receives when the holder
// releases, long before it would look again on its own (a 10s poll
// interval, a holder's lease of 30s).
func TestWaiterWokenByWatch(t *testing.T) {
	ns := testNamespace()
	admin := newProvider(t, ns)
	holder := newLockClient(t, newProvider(t, ns))
	waiter := newLockClient(t, newProvider(t, ns), lock.WithPollInterval(10*time.Second))
	locktest.WaiterWokenByGrant(t, ctxTimeout(t, time.Minute), admin, holder, waiter, uniqueName(t))
}

// A lock run with a GracePeriod stays closed to another replica until the
// period ends (a whole number of seconds on etcd).
func TestGracePeriodAcrossReplicas(t *testing.T) {
	ns := testNamespace()
	cs := replicas(t, ns, 2)
	ctx := ctxTimeout(t, time.Minute)
	name := uniqueName(t)
	ran := 0
	fn := func(context.Context) error { ran++; return nil }

	require.NoError(t, cs[0].Do(ctx, name, lock.Options{GracePeriod: 2 * time.Second}, fn))
	err := cs[1].Do(ctx, name, lock.Options{}, fn)
	assert.ErrorIs(t, err, lock.ErrGracePeriod, "another replica finds the grace period")
	require.Eventually(t, func() bool {
		return cs[1].Do(ctx, name, lock.Options{}, fn) == nil
	}, 10*time.Second, 50*time.Millisecond, "the lock opens once the period ends")
	assert.Equal(t, 2, ran)
}

// TTLs are whole seconds on etcd: a TTL is rounded up, never down, and a
// TTL under the server's minimum lives that minimum.
func TestTTLRoundedUp(t *testing.T) {
	p := newProvider(t, testNamespace())
	assert.Equal(t, time.Second, p.MinTTL(), "the test member's minimum lease (10ms heartbeat, 100ms election)")
	ctx := ctxTimeout(t, 30*time.Second)
	key, o := uniqueName(t), newOwner()
	start := time.Now()
	// 1.1s, checked alive at 1.3s: 700ms before the 2s lease ends for a late
	// sleep and the Inspect on a loaded machine (1.5s checked at 1.6s left
	// 400ms). A TTL rounded down (1s) or to the nearest second (1s too,
	// which 1.5s did not catch) is gone by then, or at the latest soon after
	// 1s, which the check on lived below catches.
	rec, err := p.Acquire(ctx, key, o, 1100*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 1100*time.Millisecond, rec.TTL, "the TTL asked for is the TTL reported")
	time.Sleep(1300 * time.Millisecond)
	h, err := p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, o, h.Owner, "a 1.1s TTL lives 2s (a lease of 2 whole seconds)")
	require.Eventually(t, func() bool {
		h, err := p.Inspect(ctx, key)
		return err == nil && h.Owner == ""
	}, 5*time.Second, 10*time.Millisecond, "the record goes once its lease runs out")
	lived := time.Since(start)
	assert.GreaterOrEqual(t, lived, 2*time.Second, "never less than the lease")
	t.Logf("a record asked to live 1.1s lived %v", lived.Round(time.Millisecond))
}

// Fencing tokens are revisions: they go on increasing after the member
// restarts from its data, and across keys.
func TestTokensSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	m, err := startMember(dir)
	require.NoError(t, err)
	ctx := ctxTimeout(t, time.Minute)
	token := func(endpoint, key string) uint64 {
		cli := newClient(t, endpoint)
		p, err := etcd.NewProvider(ctx, cli)
		require.NoError(t, err)
		defer p.Close()
		o := newOwner()
		rec, err := p.Acquire(ctx, key, o, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, o, rec.Owner)
		require.NoError(t, p.Release(ctx, key, o))
		return rec.Token
	}
	key := uniqueName(t)
	before := token(m.endpoint, key)
	other := token(m.endpoint, key+":other")
	assert.Greater(t, other, before, "tokens increase across keys too")
	m.e.Close()

	m, err = startMember(dir) // the same data, new ports
	require.NoError(t, err)
	defer m.e.Close()
	after := token(m.endpoint, key)
	assert.Greater(t, after, other, "a token after a restart is greater than every token before it")
}
