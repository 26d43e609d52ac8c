package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// runClient checks what a lock.Client built on the provider promises its
// users where that rests on the provider's answers: a lock lost under its
// holder is reported as lost, with why, and Done is closed only once Err
// says so.
func (s *suite) runClient(t *testing.T) {
	t.Run("ReleaseOfTakenLockSaysLostBeforeDone", s.releaseOfTakenLock)
	t.Run("RenewalFindsLockRemovedOrTaken", s.renewalFindsLockRemovedOrTaken)
	t.Run("GrantToStalledWaiterPassesOn", s.grantToStalledWaiterPassesOn)
	t.Run("CancelledWaitLeavesNothing", s.cancelledWaitLeavesNothing)
	t.Run("TimeoutInQueueIsNotAnOutage", s.timeoutInQueueIsNotAnOutage)
	t.Run("RecordReportsTTLToItsEnd", s.ttlToTheEnd)
}

// newClient returns a Client on p, closed at the end of the test.
func newClient(t *testing.T, p lock.Provider, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(p, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// releaseOfTakenLock: a lock whose record was force-released and granted to
// another owner is released while a goroutine waits on Done: the Release
// returns a *lock.LostError (LostTaken, naming the new holder), and the
// goroutine, reading Err right after Done, gets that same error, never nil
// (issue 23: Done used to be closed before the provider had answered). With
// a grace period too, whose release is a Finish.
func (s *suite) releaseOfTakenLock(t *testing.T) {
	ctx := s.ctx
	for _, grace := range []time.Duration{0, time.Second} {
		c := newClient(t, testenv.SlowRelease(s.b.New(t), 50*time.Millisecond))
		other := newClient(t, s.b.New(t))
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{GracePeriod: grace})
		require.NoError(t, err)
		_, err = other.ForceRelease(ctx, name)
		require.NoError(t, err)
		l2, err := other.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "grace %v: a force-released lock is free for another owner", grace)
		t.Cleanup(func() { _ = l2.Release(context.Background()) })

		seen := make(chan error, 1)
		done := l.Done()
		go func() {
			<-done
			seen <- l.Err()
		}()
		err = l.Release(ctx)
		require.ErrorIs(t, err, lock.ErrLost, "grace %v: the release finds the lock taken", grace)
		werr := receive(t, seen, 10*time.Second, "grace %v: Done was not closed after Release returned", grace)
		assert.Equal(t, err, werr, "grace %v: Err read right after Done is the loss Release returned", grace)
		var le *lock.LostError
		if assert.ErrorAs(t, err, &le) {
			assert.Equal(t, lock.LostTaken, le.Reason, "grace %v: another owner was found before the lease ran out", grace)
			assert.Equal(t, l2.Owner(), le.Holder, "grace %v: the LostError names the new holder", grace)
		}
		assert.NoError(t, l2.Release(ctx), "grace %v: the late release left the new holder's record", grace)
	}
}

// renewalFindsLockRemovedOrTaken: a renewal (here Extend, which renews at
// once) that finds the key free reports LostRemoved; one that finds it held
// by another owner reports LostTaken with the holder. Both are the cause of
// the handler's context in Do.
func (s *suite) renewalFindsLockRemovedOrTaken(t *testing.T) {
	ctx := s.ctx
	for _, taken := range []bool{false, true} {
		c := newClient(t, s.b.New(t))
		other := newClient(t, s.b.New(t))
		name := uniqueName(t)
		var l2 *lock.Lock
		var cause error
		err := c.Do(ctx, name, lock.Options{Lease: 30 * time.Second}, func(ctx context.Context) error {
			if _, err := other.ForceRelease(ctx, name); err != nil {
				return err
			}
			if taken {
				var err error
				if l2, err = other.Acquire(ctx, name, lock.Options{}); err != nil {
					return err
				}
			}
			l, _ := lock.FromContext(ctx)
			_ = l.Extend(ctx, time.Minute)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		})
		if l2 != nil {
			t.Cleanup(func() { _ = l2.Release(context.Background()) })
		}
		require.ErrorIs(t, err, lock.ErrLost, "taken %v", taken)
		var le *lock.LostError
		require.ErrorAs(t, cause, &le, "taken %v: the handler's context's cause is the loss", taken)
		if taken {
			assert.Equal(t, lock.LostTaken, le.Reason, "the renewal found another owner")
			assert.Equal(t, l2.Owner(), le.Holder, "the LostError names the new holder")
		} else {
			assert.Equal(t, lock.LostRemoved, le.Reason, "the renewal found the key free")
			assert.Empty(t, le.Holder)
		}
	}
}

// grantToStalledWaiterPassesOn: a release hands the lock to the first
// waiter, whose process is stalled (its grants held back, its polls an hour
// apart). The live waiter behind it gets the lock once the handoff window has
// run out, not a lease later; the stalled one, when it resumes, finds the
// grant gone, waits again and gets the lock after the live one, with a
// greater token; never two holders at once (issue 23: the lock used to idle
// for the stalled waiter's whole lease).
func (s *suite) grantToStalledWaiterPassesOn(t *testing.T) {
	if !s.expires(t) {
		return
	}
	ctx := s.ctx
	const (
		window = 300 * time.Millisecond
		lease  = 10 * time.Second
	)
	name := uniqueName(t)
	holder := newClient(t, s.b.New(t))
	var sp grantStall
	stalled := newClient(t, sp.over(s.b.New(t)), lock.WithPollInterval(time.Hour), lock.WithHandoffWindow(window))
	live := newClient(t, s.b.New(t), lock.WithPollInterval(50*time.Millisecond), lock.WithHandoffWindow(window))

	h, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	waiting := lock.Options{Wait: true, MaxWait: 30 * time.Second, Lease: lease}
	waiters := func(n int) func() bool {
		return func() bool {
			st, err := holder.Inspect(ctx, name)
			return err == nil && st.Waiters == n
		}
	}
	stalledGot := testenv.AcquireLater(ctx, stalled, name, waiting)
	require.Eventually(t, waiters(1), 10*time.Second, 5*time.Millisecond, "the first waiter queues")
	liveGot := testenv.AcquireLater(ctx, live, name, waiting)
	require.Eventually(t, waiters(2), 10*time.Second, 5*time.Millisecond, "the second waiter queues")

	sp.stall()
	released := time.Now()
	require.NoError(t, h.Release(ctx)) // hands the lock to the stalled waiter
	lv := receive(t, liveGot, 20*time.Second, "the live waiter did not get the lock")
	require.NoError(t, lv.Err)
	waited := lv.At.Sub(released)
	t.Logf("the live waiter got the lock %v after the release (handoff window %v, lease %v)", waited.Round(time.Millisecond), window, lease)
	assert.Less(t, waited, lease/2, "the live waiter waited for the stalled waiter's lease")
	assert.Greater(t, lv.Lock.Token(), h.Token())

	// The stalled waiter resumes: its grant is gone, it waits again.
	require.Equal(t, 1, sp.resume(), "a grant was handed to the stalled waiter")
	select {
	case r := <-stalledGot:
		t.Fatalf("the stalled waiter took a lock that had passed on: %v, %v", r.Lock, r.Err)
	case <-time.After(200 * time.Millisecond):
	}
	st, err := holder.Inspect(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, lv.Lock.Owner(), st.Owner, "the live waiter holds the lock")
	require.NoError(t, lv.Lock.Err())
	require.NoError(t, lv.Lock.Release(ctx))

	sv := receive(t, stalledGot, 20*time.Second, "the resumed waiter did not get the lock after the live one")
	require.NoError(t, sv.Err)
	assert.Greater(t, sv.Lock.Token(), lv.Lock.Token(), "tokens increase")
	require.NoError(t, sv.Lock.Release(ctx))
}
