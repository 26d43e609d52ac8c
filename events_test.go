package lock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// Events: what each says, and the clock that stamps them. (Renewed is in
// lease_test.go.)

func TestEvents(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		c := newClient(t, b.replica(t), rec.option())
		name := uniqueName(t)
		o := lock.Options{MaxDuration: time.Minute, Lease: 10 * time.Second, GracePeriod: 50 * time.Millisecond}
		l, err := c.Acquire(ctx, name, o)
		require.NoError(t, err)
		_, err = c.Acquire(ctx, name, lock.Options{})
		require.ErrorIs(t, err, lock.ErrHeld)
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, l.Release(ctx))
		_ = b.replica(t).Release(ctx, l.Key(), l.Owner()) // end the grace period now

		events := drain(rec)
		kinds := make([]lock.EventKind, len(events))
		for i, e := range events {
			kinds[i] = e.Kind
		}
		require.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventContended, lock.EventSkipped, lock.EventReleased}, kinds)
		for _, e := range events {
			assert.Equal(t, c.Key(name), e.Key, "%v names the key", e.Kind)
			assert.NotEmpty(t, e.Owner, "%v names the owner", e.Kind)
			assert.False(t, e.Time.IsZero(), "%v is stamped", e.Kind)
		}
		acq, cont, skip, rel := events[0], events[1], events[2], events[3]
		assert.Equal(t, l.Token(), acq.Token)
		assert.Equal(t, l.Owner(), acq.Owner)
		assert.Equal(t, time.Minute, acq.MaxDuration)
		assert.Equal(t, 10*time.Second, acq.Lease)
		assert.Equal(t, cont.Owner, skip.Owner, "Contended and Skipped are of one acquisition")
		assert.NotEqual(t, l.Owner(), skip.Owner, "every acquisition has its own owner")
		var na *lock.NotAcquiredError
		if assert.ErrorAs(t, skip.Err, &na, "Skipped carries the *NotAcquiredError") {
			assert.ErrorIs(t, na, lock.ErrHeld)
		}
		assert.Equal(t, l.Token(), rel.Token)
		assert.Equal(t, l.Owner(), rel.Owner)
		assert.GreaterOrEqual(t, rel.Held, 5*time.Millisecond, "Released says how long the lock was held")
		assert.Equal(t, 50*time.Millisecond, rel.GracePeriod)
		assert.NoError(t, rel.Err)
	})
}

func TestEventsWithFakeClock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clock := testenv.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := newRecorder()
	c := newClient(t, lock.NewMemoryProvider(), lock.WithEventClock(clock), rec.option())
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
	require.NoError(t, err)
	start := clock.Now()
	clock.Advance(90 * time.Second)
	require.NoError(t, l.Release(ctx))
	events := drain(rec)
	require.Len(t, events, 2)
	assert.Equal(t, start, events[0].Time, "events are stamped by the Client's clock")
	assert.Equal(t, start.Add(90*time.Second), events[1].Time, "events are stamped by the Client's clock")
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
		// Release 200ms after the wait began, however late this goroutine
		// or the waiter's Acquire is scheduled.
		for e := range rec.ch {
			if e.Kind == lock.EventContended {
				break
			}
		}
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
