package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestOncePerCountsFromTheStart: with OncePer the lock stays closed until
// OncePer after the hold began, however short the run; GracePeriod counts
// from the release instead.
func TestOncePerCountsFromTheStart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		if !canExpire(t, b) {
			return
		}
		ctx := ctxTimeout(t, 30*time.Second)
		c, other := newClient(t, b.replica(t)), newClient(t, b.replica(t))
		name := uniqueName(t)
		const window = 600 * time.Millisecond

		start := time.Now()
		l, err := c.Acquire(ctx, name, lock.Options{OncePer: window})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx)) // a short run

		_, err = other.Acquire(ctx, name, lock.Options{})
		require.ErrorIs(t, err, lock.ErrGracePeriod, "closed after a short run")
		var na *lock.NotAcquiredError
		require.ErrorAs(t, err, &na)
		assert.LessOrEqual(t, na.RetryAfter, window, "closed for what is left of the window, not a whole window after the release")
		assert.Equal(t, l.Owner(), na.Holder, "the error names the holder")

		// Free once the window since the start has passed.
		time.Sleep(time.Until(start.Add(window + 100*time.Millisecond)))
		l2, err := other.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "free %v after the start", window+100*time.Millisecond)

		// A run longer than its window frees the lock at release.
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, l2.Release(ctx))
		l3, err := c.Acquire(ctx, name, lock.Options{OncePer: 100 * time.Millisecond})
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, l3.Release(ctx))
		l4, err := other.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "a run longer than OncePer frees the lock at release")
		require.NoError(t, l4.Release(ctx))
	})
}

// TestEveryTickRunsWithOncePer is the quickstart's hourly job at a small
// scale: one replica runs a job every tick under a window of one tick. With
// GracePeriod (counted from the end of the run) every second tick is
// skipped; with OncePer a little under a tick (counted from the start),
// every tick runs.
func TestEveryTickRunsWithOncePer(t *testing.T) {
	const tick, run = 500 * time.Millisecond, 100 * time.Millisecond
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		what    string
		o       lock.Options
		wantRan int
	}{
		{"GracePeriod of a tick", lock.Options{GracePeriod: tick}, 3},
		{"OncePer of 80% of a tick", lock.Options{OncePer: tick * 8 / 10}, 6},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := newClient(t, lock.NewMemoryProvider())
			name := uniqueName(t)
			ran := 0
			start := time.Now()
			for i := range 6 {
				time.Sleep(time.Until(start.Add(time.Duration(i) * tick)))
				err := c.Do(ctx, name, tc.o, func(context.Context) error {
					time.Sleep(run)
					return nil
				})
				if err == nil {
					ran++
				} else if !errors.Is(err, lock.ErrGracePeriod) {
					t.Fatalf("tick %d: %v", i, err)
				}
			}
			assert.Equal(t, tc.wantRan, ran, "ticks run out of 6")
		})
	}
}

// TestMaxWaitBoundsTheWaitOnly: MaxWait ends a wait with ErrTimeout while
// MaxDuration, the bound of the hold, is much longer; a hold is not cut at
// MaxWait.
func TestMaxWaitBoundsTheWaitOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c, other := newClient(t, b.replica(t)), newClient(t, b.replica(t))
		name := uniqueName(t)
		o := lock.Options{Wait: true, MaxWait: 200 * time.Millisecond, MaxDuration: time.Minute}

		l, err := c.Acquire(ctx, name, o)
		require.NoError(t, err)
		start := time.Now()
		_, err = other.Acquire(ctx, name, o)
		assert.ErrorIs(t, err, lock.ErrTimeout, "the wait ends at MaxWait")
		assert.Less(t, time.Since(start), 5*time.Second)
		time.Sleep(300 * time.Millisecond)
		assert.NoError(t, l.Err(), "the hold goes on past MaxWait")
		require.NoError(t, l.Release(ctx))

		_, err = c.Acquire(ctx, name, lock.Options{MaxWait: -time.Second})
		assert.ErrorIs(t, err, lock.ErrInvalidArgument)
		_, err = c.Acquire(ctx, name, lock.Options{OncePer: -time.Second})
		assert.ErrorIs(t, err, lock.ErrInvalidArgument)
	})
}

// TestEventsCarryWaitTime: Acquired and Skipped events say how long the
// acquisition took.
func TestEventsCarryWaitTime(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	m := lock.NewMemoryProvider()
	rec := newRecorder()
	c, holder := newClient(t, m, rec.option()), newClient(t, m)
	name := uniqueName(t)
	l, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = l.Release(ctx)
	}()
	l2, err := c.Acquire(ctx, name, lock.Options{Wait: true})
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
	e := waitEvent(t, rec, lock.EventAcquired)
	assert.GreaterOrEqual(t, e.Waited, 150*time.Millisecond, "Acquired says how long the wait was")

	l, err = holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	defer l.Release(ctx)
	_, err = c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 100 * time.Millisecond})
	require.ErrorIs(t, err, lock.ErrTimeout)
	e = waitEvent(t, rec, lock.EventSkipped)
	assert.GreaterOrEqual(t, e.Waited, 90*time.Millisecond, "Skipped says how long the wait was")
}
