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

// TestQueuerConformance checks the wait queue that Options.Fair uses, on every
// backend, through the Queuer interface.
func TestQueuerConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 20*time.Second)
		p := b.replica(t)
		q, ok := p.(lock.Queuer)
		require.True(t, ok, "the built-in providers keep a wait queue")
		key := "lock:" + uniqueName(t)
		a, bo, c, d := newOwner(), newOwner(), newOwner(), newOwner()

		type note struct{ key, next string }
		notes := make(chan note, 16)
		stop, err := p.(lock.Topic).Subscribe(ctx, func(key, next string) { notes <- note{key, next} })
		require.NoError(t, err)
		defer stop()
		nextNote := func() note {
			select {
			case n := <-notes:
				return n
			case <-time.After(5 * time.Second):
				t.Fatal("no announcement within 5s")
				return note{}
			}
		}

		acq := func(owner string, wait time.Duration) lock.Record {
			t.Helper()
			rec, err := q.AcquireQueued(ctx, key, owner, time.Minute, wait)
			require.NoError(t, err)
			return rec
		}
		assert.Equal(t, a, acq(a, time.Minute).Owner, "an empty queue lets anyone in")
		assert.Equal(t, a, acq(bo, time.Minute).Owner, "B waits behind the holder")
		assert.Equal(t, a, acq(c, time.Minute).Owner, "C waits behind B")

		require.NoError(t, p.Release(ctx, key, a))
		assert.Equal(t, note{key, bo}, nextNote(), "the release names the first waiter")
		assert.Empty(t, acq(c, time.Minute).Owner, "C may not overtake B")
		assert.Empty(t, acq(d, 0).Owner, "a caller that does not wait may not overtake B either")
		rec := acq(bo, time.Minute)
		assert.Equal(t, bo, rec.Owner, "B's turn")
		assert.Positive(t, rec.Token)

		require.NoError(t, p.Release(ctx, key, bo))
		assert.Equal(t, note{key, c}, nextNote(), "then C's")
		require.NoError(t, q.Dequeue(ctx, key, c))
		assert.Equal(t, note{key, ""}, nextNote(), "C leaving a free key announces it, now nobody's turn")
		assert.Equal(t, d, acq(d, 0).Owner, "D did not join the queue, which is empty now")
		require.NoError(t, p.Release(ctx, key, d))
		nextNote()

		// A waiter that stops asking drops out after its wait.
		e, f := newOwner(), newOwner()
		assert.Equal(t, a, acq(a, time.Minute).Owner)
		assert.Equal(t, a, acq(e, 100*time.Millisecond).Owner)
		require.NoError(t, p.Release(ctx, key, a))
		assert.Equal(t, note{key, e}, nextNote())
		assert.Eventually(t, func() bool { return acq(f, 0).Owner == f }, 5*time.Second, 20*time.Millisecond,
			"E, which stopped asking, no longer blocks the queue")
		require.NoError(t, p.Release(ctx, key, f))
		nextNote()

		if b.raw != nil {
			n, err := b.raw.Exists(ctx, "{"+key+"}", "{"+key+"}:q", "{"+key+"}:qt").Result()
			require.NoError(t, err)
			assert.Zero(t, n, "no record and no queue left behind")
		}
		_, err = q.AcquireQueued(ctx, key, a, time.Minute, -time.Second)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument)
	})
}

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

func (p *countingQueuer) AcquireQueued(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Record, error) {
	p.attempts.Add(1)
	return p.Provider.(lock.Queuer).AcquireQueued(ctx, key, owner, ttl, wait)
}

func (p *countingQueuer) Dequeue(ctx context.Context, key, owner string) error {
	return p.Provider.(lock.Queuer).Dequeue(ctx, key, owner)
}

func (p *countingQueuer) Subscribe(ctx context.Context, notify func(key, next string)) (func(), error) {
	return p.Provider.(lock.Topic).Subscribe(ctx, notify)
}

func TestFairNeedsQueuer(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Second)
	c := newClient(t, struct{ lock.Provider }{lock.NewMemoryProvider()})
	_, err := c.Acquire(ctx, uniqueName(t), lock.Options{Fair: true})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
}

// TestLongWaiterIsNotOvertaken: a waiter that has waited a poll interval
// joins the provider's queue, so that when the holder releases, even a faster
// caller in the holder's own process cannot take the lock before it. This is
// what bounds how long a waiter in a slower process can be passed over.
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
		go func() {
			l, err := slow.Acquire(ctx, name, lock.Options{Wait: true})
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitEvent(t, rec, lock.EventContended)
		require.Eventually(t, sp.joined.Load, 10*time.Second, time.Millisecond,
			"the waiter joins the provider's queue after a poll interval of waiting")

		require.NoError(t, held.Release(ctx))
		l, err := fast.Acquire(ctx, name, lock.Options{})
		assert.ErrorIs(t, err, lock.ErrHeld, "the fast caller, right after the release, must not overtake the queued waiter")
		if err == nil {
			_ = l.Release(ctx)
		}
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

func (p *slowProvider) AcquireQueued(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Record, error) {
	time.Sleep(p.delay)
	rec, err := p.Provider.(lock.Queuer).AcquireQueued(ctx, key, owner, ttl, wait)
	if err == nil && wait > 0 {
		p.joined.Store(true)
	}
	return rec, err
}

func (p *slowProvider) Dequeue(ctx context.Context, key, owner string) error {
	return p.Provider.(lock.Queuer).Dequeue(ctx, key, owner)
}

func (p *slowProvider) Subscribe(ctx context.Context, notify func(key, next string)) (func(), error) {
	return p.Provider.(lock.Topic).Subscribe(ctx, notify)
}
