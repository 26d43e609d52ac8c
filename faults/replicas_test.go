package faults_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/locktest"
)

// replicaTimeout is how long a grant waits for its replica in
// TestWaitForReplicas.
const replicaTimeout = 300 * time.Millisecond

// TestWaitForReplicas runs the WaitForReplicas opt-in on a primary with one
// replica: a grant, and a lock handed to a waiter by a release, are on the
// replica by the time the caller holds them; with the replica gone, an
// acquisition fails with ErrNotReplicated and leaves nothing behind, a
// waiter's grant cannot be confirmed and its wait ends with
// ErrNotReplicated, and a holder whose renewals are not replicated is told
// its lock is lost at the end of its lease.
func TestWaitForReplicas(t *testing.T) {
	primary, replica := faults.StartRedis(t), faults.StartRedis(t)
	direct, onReplica := newRedis(t, primary.Addr), newRedis(t, replica.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow(t, ctx, onReplica, direct, primary.Addr)

	losses := make(chan lock.Event, 64)
	renewed := make(chan lock.Event, 256)
	newClient := func(opts ...lock.ClientOption) *lock.Client {
		p := lock.NewRedisProvider(newRedis(t, primary.Addr), lock.WaitForReplicas(1, replicaTimeout))
		c, err := lock.NewClient(p, append(opts, lock.WithPollInterval(200*time.Millisecond))...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder := newClient(lock.WithEvents(func(e lock.Event) {
		switch e.Kind {
		case lock.EventLost:
			losses <- e
		case lock.EventRenewed:
			select {
			case renewed <- e:
			default:
			}
		}
	}))
	waiter := newClient()
	name := "replicated"
	key := holder.Key(name)

	measureWaitCost(t, ctx, primary.Addr)

	// A grant is on the replica when Acquire returns.
	l, err := holder.Acquire(ctx, name, lock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	v, err := onReplica.Get(ctx, key).Result()
	require.NoError(t, err, "the grant is on the replica when Acquire returns")
	assert.True(t, strings.HasPrefix(v, l.Owner()+","), "the replica holds the grant: %q", v)

	// A lock handed to a waiter is on the replica when the waiter holds it.
	got := make(chan *lock.Lock, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 30 * time.Second})
		assert.NoError(t, err)
		got <- wl
	}()
	waitQueued(t, ctx, holder, name)
	require.NoError(t, l.Release(ctx))
	wl := <-got
	require.NotNil(t, wl)
	v, err = onReplica.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(v, wl.Owner()+","), "the handed-over grant is on the replica when the waiter holds it: %q", v)

	// The replica goes away: the holder's renewals fail, and it is told at
	// the end of its lease.
	require.NoError(t, wl.Release(ctx))
	l, err = holder.Acquire(ctx, name, lock.Options{Lease: 900 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, replica.Kill())
	fault(t, "kill the replica")
	killed := time.Now()
	for e := range renewed {
		if e.Owner == l.Owner() && errors.Is(e.Err, lock.ErrNotReplicated) {
			break // a renewal that no replica acknowledged
		}
	}
	select {
	case <-l.Done():
		assert.ErrorIs(t, l.Err(), lock.ErrLost)
		t.Logf("holder told %v after the replica was killed (lease 900ms)", time.Since(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told within 10s that its renewals were not replicated")
	}
	_ = l.Release(ctx)

	// Without a replica, an acquisition fails and leaves nothing behind.
	began := time.Now()
	_, err = waiter.Acquire(ctx, "unreplicated", lock.Options{})
	require.ErrorIs(t, err, lock.ErrNotReplicated)
	assert.Less(t, time.Since(began), replicaTimeout+5*time.Second, "it fails after the WAIT timeout")
	assertGone(t, ctx, direct, waiter.Key("unreplicated"))

	// A waiter's grant cannot be confirmed: its wait ends with
	// ErrNotReplicated, and nothing is left behind.
	other := newClient()
	ol, err := other.Acquire(ctx, "handover", lock.Options{}) // fails: no replica
	require.ErrorIs(t, err, lock.ErrNotReplicated)
	require.Nil(t, ol)
	// Hold it through a provider without WAIT, as a process configured
	// without it would.
	plain, err := lock.NewClient(lock.NewRedisProvider(newRedis(t, primary.Addr)))
	require.NoError(t, err)
	defer plain.Close()
	pl, err := plain.Acquire(ctx, "handover", lock.Options{})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "handover", lock.Options{Wait: true, MaxWait: 30 * time.Second})
		errc <- err
	}()
	waitQueued(t, ctx, plain, "handover")
	require.NoError(t, pl.Release(ctx))
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, lock.ErrNotReplicated, "the wait ends with the grant that could not be confirmed")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter's Acquire did not end within 20s")
	}
	assertGone(t, ctx, direct, waiter.Key("handover"))

	// The replica comes back: grants succeed again.
	require.NoError(t, replica.Start())
	follow(t, ctx, onReplica, direct, primary.Addr)
	l, err = waiter.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err, "grants succeed once the replica is back")
	require.NoError(t, l.Release(ctx))
}

// measureWaitCost prints what WaitForReplicas costs an uncontended
// Acquire+Release cycle on loopback: 300 cycles without it, then 300 with it.
func measureWaitCost(t *testing.T, ctx context.Context, addr string) {
	const cycles = 300
	for _, wait := range []bool{false, true} {
		var opts []lock.RedisOption
		if wait {
			opts = append(opts, lock.WaitForReplicas(1, replicaTimeout))
		}
		c, err := lock.NewClient(lock.NewRedisProvider(newRedis(t, addr), opts...))
		require.NoError(t, err)
		took := make([]time.Duration, 0, cycles)
		for i := range cycles {
			began := time.Now()
			l, err := c.Acquire(ctx, "cost", lock.Options{})
			require.NoError(t, err, "cycle %d", i)
			require.NoError(t, l.Release(ctx))
			took = append(took, time.Since(began))
		}
		require.NoError(t, c.Close())
		slices.Sort(took)
		figures("wait-for-replicas cost: WaitForReplicas %v: acquire+release p50 %v, p99 %v (%d cycles, 1 replica, loopback)",
			wait, took[cycles/2].Round(time.Microsecond), took[cycles*99/100].Round(time.Microsecond), cycles)
	}
}

// TestWaitForReplicasConformance runs the provider conformance suite on a
// provider with WaitForReplicas, on a primary with one replica.
func TestWaitForReplicasConformance(t *testing.T) {
	primary, replica := faults.StartRedis(t), faults.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow(t, ctx, newRedis(t, replica.Addr), newRedis(t, primary.Addr), primary.Addr)
	locktest.Run(t, locktest.Backend{
		New: func(t testing.TB) lock.Provider {
			return lock.NewRedisProvider(newRedis(t, primary.Addr), lock.WaitForReplicas(1, time.Second))
		},
		Expires:         true,
		SkipsUnlistened: true,
		Remote:          true,
	})
}

// TestWaitForReplicasBadInput: a provider with a number of replicas or a
// timeout it cannot use fails every call with ErrInvalidArgument.
func TestWaitForReplicasBadInput(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := context.Background()
	for _, o := range []struct {
		n       int
		timeout time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, time.Microsecond}} {
		p := lock.NewRedisProvider(newRedis(t, srv.Addr), lock.WaitForReplicas(o.n, o.timeout))
		_, err := p.Acquire(ctx, "k", "o", time.Second)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "WaitForReplicas(%d, %v)", o.n, o.timeout)
	}
}

// follow makes replica a replica of the primary at addr and waits until it
// is in sync.
func follow(t *testing.T, ctx context.Context, replica, primary *redis.Client, addr string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	require.NoError(t, replica.Do(ctx, "REPLICAOF", host, port).Err()) // go-redis has SlaveOf only, deprecated
	require.Eventually(t, func() bool {
		info, err := replica.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return false
		}
		// A write, then WAIT: a WAIT on a connection that wrote nothing
		// counts a replica still loading its first copy.
		if err := primary.Set(ctx, "follow", time.Now().UnixNano(), 0).Err(); err != nil {
			return false
		}
		n, err := primary.Do(ctx, "WAIT", 1, 100).Int()
		return err == nil && n == 1
	}, 20*time.Second, 50*time.Millisecond, "the replica follows the primary")
}

// waitQueued waits until the lock called name has a waiter.
func waitQueued(t *testing.T, ctx context.Context, c *lock.Client, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := c.Inspect(ctx, name)
		return err == nil && s.Waiters > 0
	}, 10*time.Second, 5*time.Millisecond, "a waiter queues for %s", name)
}

// assertGone checks that key is (or soon is: clean-ups run in the
// background) free on the primary.
func assertGone(t *testing.T, ctx context.Context, direct *redis.Client, key string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		n, err := direct.Exists(ctx, key).Result()
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "nothing is left under %s", key)
}
