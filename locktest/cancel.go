package locktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// cancelledWaitLeavesNothing (issue 31, items 2 and 3): a waiter's context
// is cancelled, then the holder releases, which may hand the lock to the
// waiter still in the provider's queue. The waiter's Acquire returns the
// context's error, never the lock (its wait ended before the release), and
// once it has returned nothing of it is stored: a third Client that tries
// at once takes the lock. Before the fix a third of the rounds on memory
// found the lock held by the cancelled waiter, and a few returned it.
func (s *suite) cancelledWaitLeavesNothing(t *testing.T) {
	ctx := s.ctx
	rounds := 100
	if s.b.Remote {
		rounds = 30
	}
	name := uniqueName(t)
	holder := newClient(t, s.b.New(t))
	waiter := newClient(t, s.b.New(t))
	third := newClient(t, s.b.New(t))
	type result struct {
		l   *lock.Lock
		err error
	}
	var returned, stored int
	for round := range rounds {
		h, err := holder.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "round %d", round)
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan result, 1)
		go func() {
			l, err := waiter.Acquire(wctx, name, lock.Options{Wait: true, MaxWait: 20 * time.Second, Lease: 5 * time.Second})
			got <- result{l, err}
		}()
		require.Eventually(t, func() bool {
			st, err := holder.Inspect(ctx, name)
			return err == nil && st.Waiters == 1
		}, 10*time.Second, 2*time.Millisecond, "round %d: the waiter queues", round)
		cancel()
		require.NoError(t, h.Release(ctx), "round %d", round)
		r := receive(t, got, 15*time.Second, "round %d: the cancelled waiter did not return", round)
		if r.l != nil {
			returned++
			assert.NoError(t, r.l.Release(ctx))
		} else {
			assert.ErrorIs(t, r.err, context.Canceled, "round %d", round)
			assert.ErrorIs(t, r.err, lock.ErrNotAcquired, "round %d", round)
		}
		l, err := third.Acquire(ctx, name, lock.Options{})
		if err != nil {
			stored++
			_, err = third.ForceRelease(ctx, name)
			require.NoError(t, err)
			continue
		}
		require.NoError(t, l.Release(ctx))
	}
	t.Logf("%d rounds: the lock returned to a cancelled waiter %d times, found held after its Acquire returned %d times", rounds, returned, stored)
	assert.Zero(t, returned, "a waiter whose context ended before the release was returned the lock")
	assert.Zero(t, stored, "a cancelled waiter's grant was stored after its Acquire returned")
}

// timeoutInQueueIsNotAnOutage (issue 31, item 1): waiters queued behind a
// holder that keeps the lock wait out their MaxWait, a multiple of the
// poll interval, so that a look and the deadline fall together. Each gets
// ErrTimeout, and none an error that matches lock.ErrUnavailable: the
// provider answered every call it was sent (a call the context had ended
// before it was sent is not one it failed to answer).
func (s *suite) timeoutInQueueIsNotAnOutage(t *testing.T) {
	ctx := s.ctx
	// MaxWait is long enough for every waiter's first request to be
	// answered on a loaded machine (a wait that ends before the provider
	// ever answered it does match ErrUnavailable), and a multiple of poll.
	const (
		poll    = 50 * time.Millisecond
		waiters = 16
	)
	rounds := 4
	if s.b.Remote {
		rounds = 2
	}
	name := uniqueName(t)
	holder := newClient(t, s.b.New(t))
	cs := []*lock.Client{
		newClient(t, s.b.New(t), lock.WithPollInterval(poll)),
		newClient(t, s.b.New(t), lock.WithPollInterval(poll)),
	}
	// Each Client opens its inbox first (a fair wait starts with it), so
	// that no wait below spends its MaxWait on Listen.
	for _, c := range cs {
		l, err := c.Acquire(ctx, name+":warm-up", lock.Options{Wait: true, Fair: true})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	h, err := holder.Acquire(ctx, name, lock.Options{Lease: time.Minute})
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		timeouts int
		outages  []error
	)
	for range rounds {
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := cs[i%len(cs)].Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 10 * poll})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, lock.ErrUnavailable):
					outages = append(outages, err)
				case errors.Is(err, lock.ErrTimeout):
					timeouts++
				default:
					t.Errorf("a wait behind a held lock: %v, want ErrTimeout", err)
				}
			}()
		}
		wg.Wait()
	}
	require.NoError(t, h.Release(ctx))
	t.Logf("%d waits timed out; %d matched ErrUnavailable", timeouts+len(outages), len(outages))
	for _, err := range outages {
		t.Errorf("a timeout in the queue of a healthy provider matches ErrUnavailable: %v", err)
	}
}
