package faults_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
)

// sentinelOptions are the options of go-redis's failover client for the
// sentinels at addrs: NewUniversalClient with MasterName, as the README
// shows, with ContextTimeoutEnabled.
func sentinelOptions(addrs []string) *redis.UniversalOptions {
	o := universalOptions(addrs...)
	o.MasterName = faults.MasterName
	return o
}

// newSentinelClient returns a lock Client on a Redis provider over a failover
// client of its own; both are closed at the end of the test.
func newSentinelClient(t testing.TB, addrs []string, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	rc := redis.NewUniversalClient(sentinelOptions(addrs))
	t.Cleanup(func() { _ = rc.Close() })
	return newClient(t, rc, opts...)
}

// TestSentinel runs the provider conformance suite (locktest.Run) and the
// replica scenarios through the public API against a real Sentinel
// deployment (one master, two replicas, three sentinels, all started here),
// with lock Clients on go-redis's failover client: acquire and release
// across Clients with the record replicated, ErrHeld, a waiter handed the
// lock by the release's announcement, mutual exclusion with increasing
// tokens, and the OncePer and GracePeriod windows (replicated too).
func TestSentinel(t *testing.T) {
	s := faults.StartSentinel(t, faults.SentinelOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	master := s.Nodes[0].Addr
	direct := newRedis(t, master)
	var replicas []*redis.Client
	for _, n := range s.Nodes[1:] {
		replicas = append(replicas, newRedis(t, n.Addr))
	}
	// replicated checks that every replica comes to hold want under the
	// record of key (want "" for none) within two seconds.
	replicated := func(t *testing.T, key, want string) {
		t.Helper()
		for i, r := range replicas {
			var v string
			for deadline := time.Now().Add(2 * time.Second); ; {
				var err error
				v, err = r.Get(ctx, recordKey(key)).Result()
				if errors.Is(err, redis.Nil) {
					v, err = "", nil
				}
				require.NoError(t, err, "read the record on replica %d", i)
				if v == want || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			expect(t, v == want, "replica %d holds %q under %s, the master %q", i, v, recordKey(key), want)
		}
	}

	t.Run("conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Backend{
			New: func(t testing.TB) lock.Provider {
				rc := redis.NewUniversalClient(sentinelOptions(s.Addrs))
				t.Cleanup(func() { _ = rc.Close() })
				return lock.NewRedisProvider(rc)
			},
			Fence: func(t testing.TB) locktest.Fence {
				rc := redis.NewUniversalClient(sentinelOptions(s.Addrs))
				t.Cleanup(func() { _ = rc.Close() })
				return locktest.RedisFence(rc)
			},
			Expires:         true,
			SkipsUnlistened: true, // a failover client is not a Cluster's
			Remote:          true,
		})
	})

	t.Run("acquire and release", func(t *testing.T) {
		const name = "sentinel-basic"
		a, b := newSentinelClient(t, s.Addrs), newSentinelClient(t, s.Addrs)
		var last uint64
		for round := range 4 {
			l, err := a.Acquire(ctx, name, lock.Options{Lease: 5 * time.Second})
			require.NoError(t, err, "round %d", round)
			stats.grants.Add(1)
			expect(t, l.Token() > last, "round %d: token %d after %d: tokens must strictly increase", round, l.Token(), last)
			last = l.Token()
			v, _ := record(t, direct, l.Key())
			expect(t, recordOwner(v) == l.Owner(), "round %d: record %q on the master, holder %s", round, v, l.Owner())
			replicated(t, l.Key(), v)

			l2, err := b.Acquire(ctx, name, lock.Options{})
			expect(t, l2 == nil && errors.Is(err, lock.ErrHeld), "round %d: second acquisition while held: lock %v, err %v; want ErrHeld", round, l2, err)
			if l2 != nil {
				_ = l2.Release(ctx)
			}
			require.NoError(t, l.Release(ctx))
			v, _ = record(t, direct, l.Key())
			expect(t, v == "", "round %d: record %q left after the release", round, v)
			replicated(t, l.Key(), "")
			a, b = b, a
		}
	})

	t.Run("waiter handed the lock", func(t *testing.T) {
		const name = "sentinel-wake"
		holder := newSentinelClient(t, s.Addrs)
		contended, events := onContended()
		// A poll interval of 10s: only the release's announcement wakes it.
		waiter := newSentinelClient(t, s.Addrs, lock.WithPollInterval(10*time.Second), events)
		checkHandedOver(t, ctx, holder, waiter, name, contended)
	})

	t.Run("mutual exclusion", func(t *testing.T) {
		const (
			name       = "sentinel-mutex"
			clients    = 3
			goroutines = 3
			total      = 300
		)
		rctx, cancel := context.WithTimeout(ctx, 25*time.Second)
		defer cancel()
		cs := make([]*lock.Client, clients)
		for i := range cs {
			cs[i] = newSentinelClient(t, s.Addrs)
		}
		var claimed atomic.Int64
		n := exclusionRun(t, rctx, cs, goroutines, name, 20*time.Second, func() bool { return claimed.Add(1) <= total })
		expect(t, n == total, "%d critical sections ran, want %d", n, total)
	})

	t.Run("OncePer window", func(t *testing.T) {
		const (
			name   = "sentinel-onceper"
			window = time.Second
		)
		a, b := newSentinelClient(t, s.Addrs), newSentinelClient(t, s.Addrs)
		before := time.Now()
		l, err := a.Acquire(ctx, name, lock.Options{OncePer: window})
		require.NoError(t, err)
		stats.grants.Add(1)
		require.NoError(t, l.Release(ctx))
		v, ttl := record(t, direct, l.Key())
		expect(t, strings.HasSuffix(v, ",ended") && ttl > 0, "record %q (TTL %v) after a release inside OncePer, want an ended one", v, ttl)
		replicated(t, l.Key(), v)

		// The window runs from the grant, after before: an acquisition
		// answered before before+window was answered inside it. One that
		// got the lock and was answered later says nothing (the machine
		// was too slow to check inside the window): logged, not judged.
		for _, o := range []lock.Options{{}, {Wait: true, MaxWait: 5 * time.Second}} {
			l2, err := b.Acquire(ctx, name, o)
			answered := time.Since(before)
			if l2 != nil {
				_ = l2.Release(ctx)
			}
			if err == nil && answered >= window {
				t.Logf("too slow to check acquisitions inside the window: one (Wait %v) answered %v after the first acquisition's start, past the window (%v), got the lock", o.Wait, answered.Round(time.Millisecond), window)
				break
			}
			expect(t, errors.Is(err, lock.ErrGracePeriod), "acquisition (Wait %v) inside the window, answered %v after the first acquisition's start: %v, want ErrGracePeriod", o.Wait, answered.Round(time.Millisecond), err)
		}

		// Free once the window has passed, and not before (the grant came
		// after before).
		checkFreeAfter(t, ctx, b, name, l, before, "the first acquisition's start", window, "the window")
	})

	t.Run("GracePeriod tells waiters", func(t *testing.T) {
		const (
			name  = "sentinel-grace"
			grace = 600 * time.Millisecond
		)
		holder := newSentinelClient(t, s.Addrs)
		contended, events := onContended()
		waiter := newSentinelClient(t, s.Addrs, lock.WithPollInterval(10*time.Second), events)
		l, err := holder.Acquire(ctx, name, lock.Options{GracePeriod: grace})
		require.NoError(t, err)
		stats.grants.Add(1)
		done := testenv.AcquireLater(ctx, waiter, name, lock.Options{Wait: true, GracePeriod: grace, MaxDuration: 20 * time.Second})
		awaitContended(t, ctx, contended, done)
		released := time.Now()
		require.NoError(t, l.Release(ctx))
		r := <-done
		err = r.Err
		took := r.At.Sub(released)
		expect(t, errors.Is(err, lock.ErrGracePeriod), "the waiter's acquisition after a release into a window: %v, want ErrGracePeriod", err)
		expect(t, took < 2*time.Second, "the waiter was told %v after the release (poll interval 10s): the announcement did not wake it", took)
		v, _ := record(t, direct, l.Key())
		replicated(t, l.Key(), v)

		// Free once the grace period has passed, and not before (it began
		// after released).
		checkFreeAfter(t, ctx, waiter, name, l, released, "the release", grace, "the grace period")
	})
}

// checkFreeAfter checks that c can take the lock called name, last granted
// as l, once its window (OncePer or GracePeriod, named what), which began
// after from (named since), has passed, and not before, with a token above
// l's.
func checkFreeAfter(t *testing.T, ctx context.Context, c *lock.Client, name string, l *lock.Lock, from time.Time, since string, window time.Duration, what string) {
	t.Helper()
	var l2 *lock.Lock
	require.Eventually(t, func() bool {
		var err error
		l2, err = c.Acquire(ctx, name, lock.Options{})
		return err == nil
	}, window+2*time.Second, 20*time.Millisecond, "the lock is free once %s has passed", what)
	expect(t, time.Since(from) >= window-10*time.Millisecond, "the lock was free %v after %s, inside %s (%v)", time.Since(from).Round(time.Millisecond), since, what, window)
	stats.grants.Add(1)
	expect(t, l2.Token() > l.Token(), "token %d after %s, %d before", l2.Token(), what, l.Token())
	require.NoError(t, l2.Release(ctx))
}
