package lock_test

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

// TestFairOrderAcrossClients: waiters on several Clients (replicas) are
// granted the lock in the order they arrived, and each release wakes only the
// waiter whose turn it is.
func TestFairOrderAcrossClients(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		name := uniqueName(t)
		const n = 6
		var attempts atomic.Int64
		clients := make([]*lock.Client, n+1)
		recs := make([]*recorder, n+1)
		for i := range clients {
			recs[i] = newRecorder()
			p := &countingQueuer{Provider: b.replica(t), attempts: &attempts}
			clients[i] = newClient(t, p, recs[i].option(), lock.WithPollInterval(5*time.Second))
		}
		holder, err := clients[0].Acquire(ctx, name, lock.Options{Fair: true})
		require.NoError(t, err)

		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := 1; i <= n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := clients[i].Acquire(ctx, name, lock.Options{Fair: true, Wait: true})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				assert.NoError(t, l.Release(ctx))
			}()
			waitEvent(t, recs[i], lock.EventContended) // queued before the next arrives
		}
		before := attempts.Load()
		require.NoError(t, holder.Release(ctx))
		wg.Wait()
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, order, "granted in arrival order")
		// Each release wakes one waiter, which asks once: n grants take about
		// n attempts, not n*n as when every waiting process races.
		assert.LessOrEqual(t, attempts.Load()-before, int64(2*n),
			"attempts after the first release, for %d handoffs", n)
	})
}

// countingQueuer counts the provider's acquisition attempts.
type countingQueuer struct {
	lock.Provider
	attempts *atomic.Int64
}

func (p *countingQueuer) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	p.attempts.Add(1)
	return p.Provider.Queue(ctx, key, w)
}

// TestLongWaiterIsNotOvertaken: a waiter joins the provider's queue, so that
// when the holder releases, the lock is handed to it: even a faster caller in
// the holder's own process cannot take the lock before it. This is what
// bounds how long a waiter in a slower process can be passed over.
func TestLongWaiterIsNotOvertaken(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		const poll = 300 * time.Millisecond
		name := uniqueName(t)
		fast := newClient(t, b.replica(t), lock.WithPollInterval(poll))
		rec := newRecorder()
		sp := &slowProvider{Provider: b.replica(t), delay: 20 * time.Millisecond}
		slow := newClient(t, sp, lock.WithPollInterval(poll), rec.option())

		held, err := fast.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		got := make(chan error, 1)
		checked := make(chan struct{})
		go func() {
			l, err := slow.Acquire(ctx, name, lock.Options{Wait: true})
			if err == nil {
				<-checked // hold it while the fast caller tries
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitEvent(t, rec, lock.EventContended)
		require.Eventually(t, sp.joined.Load, 10*time.Second, time.Millisecond,
			"the waiter joins the provider's queue")

		require.NoError(t, held.Release(ctx))
		l, err := fast.Acquire(ctx, name, lock.Options{})
		assert.ErrorIs(t, err, lock.ErrHeld, "the fast caller, right after the release, must not overtake the queued waiter")
		if err == nil {
			_ = l.Release(ctx)
		}
		close(checked)
		require.NoError(t, <-got, "the queued waiter gets the lock")
	})
}

// slowProvider delays every acquisition attempt, so that its Client loses
// every race for a lock to a faster one.
type slowProvider struct {
	lock.Provider
	delay  time.Duration
	joined atomic.Bool // an attempt has asked to join the queue
}

func (p *slowProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	time.Sleep(p.delay)
	return p.Provider.Acquire(ctx, key, owner, ttl)
}

func (p *slowProvider) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	time.Sleep(p.delay)
	rec, err := p.Provider.Queue(ctx, key, w)
	if err == nil && rec.Queued {
		p.joined.Store(true)
	}
	return rec, err
}
