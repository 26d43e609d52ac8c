package locktest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// The checks below are for a backend's own tests of its replicas:
// Clients, each on a provider of its own (a process), sharing the
// backend's storage.

// ReplicasHoldInTurn checks that replicas that wait for the lock name hold
// it one at a time: workers goroutines on each replica run rounds holds of
// it (Do with Wait, a lease of 5s, a function of about a millisecond). At
// most one holder is in its function at any instant, no update of an
// unprotected read-modify-write is lost, and each holder's token is greater
// than the last one's.
func ReplicasHoldInTurn(t *testing.T, ctx context.Context, replicas []*lock.Client, name string, workers, rounds int) {
	t.Helper()
	var holders, maxHolders atomic.Int64
	var counter atomic.Int64 // read, then written: a lost update shows two holders
	var mu sync.Mutex
	var last uint64
	var wg sync.WaitGroup
	for _, c := range replicas {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					err := c.Do(ctx, name, lock.Options{Wait: true, Lease: 5 * time.Second}, func(ctx context.Context) error {
						raise(&maxHolders, holders.Add(1))
						l, _ := lock.FromContext(ctx)
						mu.Lock()
						assert.Greater(t, l.Token(), last, "each holder's token is greater than the last")
						last = l.Token()
						mu.Unlock()
						v := counter.Load()
						time.Sleep(time.Millisecond)
						counter.Store(v + 1)
						holders.Add(-1)
						return nil
					})
					if !assert.NoError(t, err) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	assert.EqualValues(t, 1, maxHolders.Load(), "at most one holder at any instant")
	assert.EqualValues(t, len(replicas)*workers*rounds, counter.Load(), "no update was lost")
}

// WaiterWokenByGrant checks that a waiter, whose Client polls every 10s or
// less often, is woken by the grant the holder's release sends, long
// before it would look again on its own: holder takes the lock name for
// 30s, waiter waits for it (Do with Wait) until admin (a provider of the
// same backend) counts one waiter in the queue, and the holder releases.
// The waiter must hold the lock within 5s of the release.
func WaiterWokenByGrant(t *testing.T, ctx context.Context, admin lock.Provider, holder, waiter *lock.Client, name string) {
	t.Helper()
	l, err := holder.Acquire(ctx, name, lock.Options{Lease: 30 * time.Second})
	require.NoError(t, err)
	acquired := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- waiter.Do(ctx, name, lock.Options{Wait: true, Lease: 30 * time.Second}, func(context.Context) error {
			acquired <- time.Now()
			return nil
		})
	}()
	require.Eventually(t, func() bool {
		rec, err := admin.Inspect(ctx, holder.Key(name))
		return err == nil && rec.Waiters == 1
	}, 10*time.Second, 10*time.Millisecond, "the waiter joins the queue")

	released := time.Now()
	require.NoError(t, l.Release(ctx))
	select {
	case at := <-acquired:
		// Well under the 10s a look would take: only the grant can be this quick.
		assert.Less(t, at.Sub(released), 5*time.Second, "the waiter is woken by the grant")
		t.Logf("the waiter held the lock %v after the release", at.Sub(released))
	case <-time.After(9 * time.Second):
		require.FailNow(t, "the waiter did not get the lock within 9s of the release")
	}
	require.NoError(t, <-done)
}
