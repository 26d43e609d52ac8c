package lock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

func TestAcquireRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))
		name := uniqueName(t)

		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		assert.Equal(t, lock.DefaultPrefix+"{"+name+"}", l.Key(), "the key is the default prefix and the name in braces")
		assert.Equal(t, c.Key(name), l.Key())
		assert.NotZero(t, l.Token(), "a grant carries a fencing token")
		assert.NotEmpty(t, l.Owner())
		assert.NoError(t, l.Err(), "a held lock has no error")
		select {
		case <-l.Done():
			t.Fatal("Done is closed while the lock is held")
		default:
		}
		h := holder(t, b.replica(t), l.Key())
		assert.Equal(t, l.Owner(), h.Owner, "the provider's record is the lock's")
		assert.Equal(t, l.Token(), h.Token)

		require.NoError(t, l.Release(ctx))
		assertClosed(t, l.Done(), "Done is closed after Release")
		assert.NoError(t, l.Err(), "a clean release leaves no error")
		assert.ErrorIs(t, l.Release(ctx), lock.ErrReleased, "Release after a clean Release says it was released")
		assert.NotErrorIs(t, l.Release(ctx), lock.ErrLost, "and not that it was lost")

		l2, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "the lock is free after Release")
		assert.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Release(ctx))
	})
}

func TestAcquireHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		l, err := cs[0].Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)

		for _, c := range cs { // another replica, and the holder's own client
			start := time.Now()
			_, err = c.Acquire(ctx, name, lock.Options{})
			assert.Less(t, time.Since(start), 2*time.Second, "without Wait, a held lock fails at once")
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, lock.ErrHeld, "the reason is that another owner holds it")
			assert.NotErrorIs(t, err, lock.ErrGracePeriod)
			require.Error(t, err)
			assert.Contains(t, err.Error(), cs[0].Key(name), "the error names the key")
			var na *lock.NotAcquiredError
			if assert.ErrorAs(t, err, &na) {
				assert.Equal(t, cs[0].Key(name), na.Key)
				assert.Positive(t, na.RetryAfter, "RetryAfter is the holder's remaining lease")
				assert.LessOrEqual(t, na.RetryAfter, lock.DefaultLease)
			}
		}
		assert.Equal(t, l.Owner(), holder(t, b.replica(t), l.Key()).Owner, "the failed attempts left the holder's record")
		assert.NoError(t, l.Release(ctx), "the holder still holds the lock")
	})
}

func TestWaitWakesPromptlyOnRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		holderC := newClient(t, b.replica(t))
		waiterC := newClient(t, b.replica(t), rec.option())
		name := uniqueName(t)
		l, err := holderC.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)

		type result struct {
			l   *lock.Lock
			at  time.Time
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := waiterC.Acquire(ctx, name, lock.Options{Wait: true})
			got <- result{l, time.Now(), err}
		}()
		waitEvent(t, rec, lock.EventContended)
		// Let the waiter pass its first looks, so that only an announcement
		// (not a poll, every second) can wake it promptly.
		time.Sleep(200 * time.Millisecond)
		select {
		case r := <-got:
			t.Fatalf("the waiter returned while the lock was held: %v", r.err)
		default:
		}
		released := time.Now()
		require.NoError(t, l.Release(ctx))

		select {
		case r := <-got:
			require.NoError(t, r.err, "the waiter gets the lock after the holder releases")
			assert.Less(t, r.at.Sub(released), 500*time.Millisecond,
				"the waiter is woken by the release's announcement, well before the 1s poll")
			assert.Greater(t, r.l.Token(), l.Token())
			assert.NoError(t, r.l.Release(ctx))
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock within 10s of the release")
		}
	})
}

func TestWaitEndsWithContext(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		l, err := cs[0].Acquire(ctxTimeout(t, 30*time.Second), name, lock.Options{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, l.Release(context.Background())) }()

		t.Run("Cancel", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(150*time.Millisecond, cancel)
			start := time.Now()
			_, err := cs[1].Acquire(ctx, name, lock.Options{Wait: true})
			assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "the wait lasts until the cancel")
			assert.Less(t, time.Since(start), 3*time.Second, "the wait ends soon after the cancel")
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.Canceled, "the reason is the context's error")
			assert.NotErrorIs(t, err, lock.ErrTimeout)
		})
		t.Run("Deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := cs[1].Acquire(ctx, name, lock.Options{Wait: true})
			assert.Less(t, time.Since(start), 3*time.Second, "the wait ends soon after the deadline")
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "the reason is the context's error")
		})
		t.Run("AlreadyCancelled", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := cs[1].Acquire(ctx, uniqueName(t), lock.Options{Wait: true})
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.Canceled)
		})
		assert.Equal(t, l.Owner(), holder(t, b.replica(t), l.Key()).Owner, "the ended waits left the holder's record")
	})
}

func TestWaitEndsAtMaxDuration(t *testing.T) {
	// Alepha test 7, with small values.
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		l, err := cs[0].Acquire(ctx, name, lock.Options{Lease: time.Minute, MaxDuration: 5 * time.Minute})
		require.NoError(t, err)
		defer func() { assert.NoError(t, l.Release(context.Background())) }()

		start := time.Now()
		ran := false
		err = cs[1].Do(ctx, name, lock.Options{Wait: true, MaxDuration: 300 * time.Millisecond}, func(context.Context) error {
			ran = true
			return nil
		})
		elapsed := time.Since(start)
		assert.False(t, ran, "the handler does not run when the wait times out")
		assert.ErrorIs(t, err, lock.ErrNotAcquired)
		assert.ErrorIs(t, err, lock.ErrTimeout, "the reason is the timeout")
		assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond, "the wait lasts MaxDuration")
		assert.Less(t, elapsed, 5*time.Second, "the wait gives up soon after MaxDuration")
		var na *lock.NotAcquiredError
		if assert.ErrorAs(t, err, &na) {
			assert.Positive(t, na.RetryAfter, "RetryAfter is the holder's remaining lease")
		}
	})
}

func TestGracePeriod(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		cs := replicas(t, b, 3)
		waiterC := newClient(t, b.replica(t), rec.option())
		name := uniqueName(t)
		grace := time.Second
		l, err := cs[0].Acquire(ctx, name, lock.Options{GracePeriod: grace})
		require.NoError(t, err)

		// Two waiters in one process: the first is woken by the release's
		// announcement; when it leaves without the lock it wakes the next.
		waited := make(chan error, 2)
		for range 2 {
			go func() {
				l, err := waiterC.Acquire(ctx, name, lock.Options{Wait: true})
				if err == nil {
					_ = l.Release(ctx)
				}
				waited <- err
			}()
		}
		waitEvent(t, rec, lock.EventContended)
		waitEvent(t, rec, lock.EventContended)
		time.Sleep(100 * time.Millisecond) // the waiters are past their first looks
		released := time.Now()             // the grace period starts after this
		require.NoError(t, l.Release(ctx))

		for i := range 2 {
			select {
			case err := <-waited:
				assert.ErrorIs(t, err, lock.ErrNotAcquired)
				assert.ErrorIs(t, err, lock.ErrGracePeriod, "waiter %d is woken by the release and skips: the lock ran in this window", i)
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d was not woken by the release", i)
			}
		}
		for _, o := range []lock.Options{{}, {Wait: true}} {
			if time.Since(released) > grace-200*time.Millisecond {
				t.Log("too slow to check acquisitions inside the grace period")
				break
			}
			l2, err := cs[1].Acquire(ctx, name, o)
			if err == nil {
				_ = l2.Release(ctx)
			}
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, lock.ErrGracePeriod, "an acquisition (Wait %v) in the window fails with ErrGracePeriod", o.Wait)
			var na *lock.NotAcquiredError
			if assert.ErrorAs(t, err, &na) {
				assert.LessOrEqual(t, na.RetryAfter, grace, "RetryAfter is what is left of the grace period")
			}
		}
		if !canExpire(t, b) {
			return
		}
		var l2 *lock.Lock
		require.Eventually(t, func() bool {
			l2, err = cs[2].Acquire(ctx, name, lock.Options{})
			return err == nil
		}, 5*time.Second, 20*time.Millisecond, "the lock is free once the grace period has passed")
		assert.GreaterOrEqual(t, time.Since(released), grace-10*time.Millisecond, "the lock stayed closed for the grace period")
		assert.NoError(t, l2.Release(ctx))
	})
}

func TestGracePeriodUnderOneMillisecond(t *testing.T) {
	// A GracePeriod that Acquire accepts must not make Release fail and leave
	// the lock held for a whole lease.
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		l, err := cs[0].Acquire(ctx, name, lock.Options{GracePeriod: 500 * time.Microsecond})
		if err != nil {
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a grace period the providers cannot store is rejected up front")
			return
		}
		err = l.Release(ctx)
		assert.NoError(t, err, "Release with an accepted GracePeriod of 500µs succeeds")
		if err != nil {
			// Do not leave the lock held for its 15s lease.
			_ = b.replica(t).Release(ctx, l.Key(), l.Owner())
			return
		}
		if !canExpire(t, b) {
			return
		}
		assert.Eventually(t, func() bool {
			l2, err := cs[1].Acquire(ctx, name, lock.Options{})
			if err == nil {
				_ = l2.Release(ctx)
			}
			return err == nil
		}, 2*time.Second, 10*time.Millisecond, "the lock is free right after a 500µs grace period")
	})
}

func TestLeaseRenewal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		// Renewed every third of a lease; a shorter lease can run out between
		// renewals on a loaded machine.
		lease := 250 * time.Millisecond
		l, err := cs[0].Acquire(ctx, name, lock.Options{Lease: lease})
		require.NoError(t, err)

		deadline := time.Now().Add(time.Second) // four leases
		for time.Now().Before(deadline) {
			time.Sleep(lease / 2)
			_, err := cs[1].Acquire(ctx, name, lock.Options{})
			require.ErrorIs(t, err, lock.ErrHeld, "a renewed lock stays held past its lease")
		}
		assert.NoError(t, l.Err(), "a renewed lock is not lost")
		select {
		case <-l.Done():
			t.Error("Done closed while the lock was being renewed")
		default:
		}
		h := holder(t, b.replica(t), l.Key())
		assert.Equal(t, l.Token(), h.Token, "the record is still the first grant's")
		assert.LessOrEqual(t, h.TTL, lease, "renewals use the lease as TTL")
		assert.NoError(t, l.Release(ctx), "a renewed lock releases cleanly")

		l2, err := cs[1].Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "the lock is free after Release")
		assert.NoError(t, l2.Release(ctx))
	})
}

// flakyUpdate is a provider whose renewals fail while fail is set.
type flakyUpdate struct {
	lock.Provider
	fail atomic.Bool
}

func (p *flakyUpdate) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.fail.Load() {
		return errors.New("connection refused")
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
}

// TestRenewalEvents: every renewal emits Renewed, with the error when it
// failed and will be tried again; the lock stays held through a short
// failure.
func TestRenewalEvents(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	p := &flakyUpdate{Provider: lock.NewMemoryProvider()}
	rec := newRecorder()
	rec.renewals = true
	c := newClient(t, p, rec.option())
	lease := 900 * time.Millisecond
	l, err := c.Acquire(ctx, "renewed", lock.Options{Lease: lease})
	require.NoError(t, err)
	e := waitEvent(t, rec, lock.EventRenewed)
	assert.NoError(t, e.Err)
	assert.Equal(t, l.Token(), e.Token)
	assert.Equal(t, l.Owner(), e.Owner)
	assert.Equal(t, lease, e.Lease, "a renewal asks for the lease")
	assert.Positive(t, e.Held)

	p.fail.Store(true)
	e = waitEvent(t, rec, lock.EventRenewed)
	require.Error(t, e.Err, "a failed renewal is emitted with its error")
	assert.Contains(t, e.Err.Error(), "connection refused")
	assert.Contains(t, e.Err.Error(), l.Key(), "the error names the key")
	p.fail.Store(false)
	for {
		e = waitEvent(t, rec, lock.EventRenewed)
		if e.Err == nil {
			break // renewed again after the failure
		}
	}
	assert.NoError(t, l.Err(), "a short failure does not lose the lock")
	require.NoError(t, l.Release(ctx))
}

func TestLostWhenRecordDeleted(t *testing.T) {
	// A crashed or partitioned store, simulated: the record disappears behind
	// the holder's back. The holder finds out within about one lease.
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		c := newClient(t, b.replica(t), rec.option())
		name := uniqueName(t)
		lease := 200 * time.Millisecond
		l, err := c.Acquire(ctx, name, lock.Options{Lease: lease})
		require.NoError(t, err)

		deleteRecord(t, b, l)
		deleted := time.Now()
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the holder did not notice the deleted record within 5s")
		}
		assert.Less(t, time.Since(deleted), 2*lease+time.Second, "the loss is found within about one lease")
		assert.ErrorIs(t, l.Err(), lock.ErrLost, "Err reports the loss")
		var le *lock.LostError
		if assert.ErrorAs(t, l.Err(), &le) {
			assert.Equal(t, l.Key(), le.Key)
			assert.Equal(t, l.Token(), le.Token)
		}
		assert.ErrorIs(t, l.Release(ctx), lock.ErrLost, "Release of a lost lock reports the loss")
		assert.ErrorIs(t, l.Extend(ctx, time.Second), lock.ErrLost, "a lost lock cannot be extended")
		assert.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventLost}, rec.kinds(),
			"a lost lock emits Lost, never Released")
	})
}

func TestMaxDurationBoundsHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Parallel()
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		cs := replicas(t, b, 2)
		c := newClient(t, b.replica(t), rec.option())
		name := uniqueName(t)
		// Leases are renewed every third of a lease; on a loaded machine a
		// shorter lease than this can run out between renewals.
		maxDur, lease := 600*time.Millisecond, 200*time.Millisecond
		start := time.Now()
		l, err := c.Acquire(ctx, name, lock.Options{MaxDuration: maxDur, Lease: lease})
		require.NoError(t, err)

		_, err = cs[0].Acquire(ctx, name, lock.Options{})
		require.ErrorIs(t, err, lock.ErrHeld)
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("the hold did not end within 5s of a %v MaxDuration", maxDur)
		}
		held := time.Since(start)
		assert.GreaterOrEqual(t, held, maxDur-lease/4, "the lock is renewed until MaxDuration")
		assert.Less(t, held, maxDur+2*time.Second, "the lock ends soon after MaxDuration")
		assert.ErrorIs(t, l.Err(), lock.ErrLost, "reaching MaxDuration loses the lock")
		var le *lock.LostError
		if assert.ErrorAs(t, l.Err(), &le) {
			if assert.Error(t, le.Cause, "the cause says MaxDuration was reached") {
				assert.Contains(t, le.Cause.Error(), "MaxDuration", "the cause says MaxDuration was reached")
			}
		}
		assert.ErrorIs(t, l.Release(ctx), lock.ErrLost)
		kinds := rec.kinds()
		assert.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventLost}, kinds)

		if !canExpire(t, b) {
			return
		}
		var l2 *lock.Lock
		require.Eventually(t, func() bool {
			l2, err = cs[1].Acquire(ctx, name, lock.Options{})
			return err == nil
		}, 5*time.Second, 20*time.Millisecond, "the record is not renewed past MaxDuration")
		assert.Less(t, time.Since(start), maxDur+2*time.Second, "the record expires about MaxDuration after the grant")
		assert.NoError(t, l2.Release(ctx))
	})
}

func TestDo(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		c := newClient(t, b.replica(t), rec.option())
		other := newClient(t, b.replica(t))
		freeNow := func(t *testing.T, name string) {
			t.Helper()
			l, err := other.Acquire(ctx, name, lock.Options{})
			if assert.NoError(t, err, "the lock is released when Do returns") {
				assert.NoError(t, l.Release(ctx))
			}
		}

		t.Run("FromContext", func(t *testing.T) {
			name := uniqueName(t)
			_, ok := lock.FromContext(ctx)
			assert.False(t, ok, "no lock outside Do")
			rec.kinds()
			var token uint64
			err := c.Do(ctx, name, lock.Options{}, func(ctx context.Context) error {
				l, ok := lock.FromContext(ctx)
				if assert.True(t, ok, "FromContext finds the lock inside Do") {
					token = l.Token()
					assert.Equal(t, c.Key(name), l.Key())
					assert.NoError(t, l.Err())
				}
				_, err := other.Acquire(ctx, name, lock.Options{})
				assert.ErrorIs(t, err, lock.ErrHeld, "the lock is held while fn runs")
				return nil
			})
			require.NoError(t, err)
			events := drain(rec)
			require.NotEmpty(t, events)
			assert.Equal(t, lock.EventAcquired, events[0].Kind)
			assert.Equal(t, events[0].Token, token, "FromContext's lock has the token of the grant")
			freeNow(t, name)
		})

		t.Run("ErrorReturnedAndReleased", func(t *testing.T) {
			name := uniqueName(t)
			boom := errors.New("boom")
			err := c.Do(ctx, name, lock.Options{}, func(context.Context) error { return boom })
			assert.ErrorIs(t, err, boom, "fn's error is returned")
			assert.NotErrorIs(t, err, lock.ErrLost)
			freeNow(t, name)
		})

		t.Run("PanicReleases", func(t *testing.T) {
			name := uniqueName(t)
			func() {
				defer func() {
					assert.Equal(t, "boom", recover(), "the panic reaches the caller")
				}()
				_ = c.Do(ctx, name, lock.Options{}, func(context.Context) error { panic("boom") })
			}()
			freeNow(t, name)
		})

		t.Run("LostCancelsContext", func(t *testing.T) {
			name := uniqueName(t)
			rec.kinds()
			err := c.Do(ctx, name, lock.Options{Lease: 150 * time.Millisecond}, func(ctx context.Context) error {
				l, ok := lock.FromContext(ctx)
				require.True(t, ok)
				deleteRecord(t, b, l)
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
					t.Error("fn's context was not cancelled within 5s of the loss")
					return nil
				}
				cause := context.Cause(ctx)
				assert.ErrorIs(t, cause, lock.ErrLost, "the context's cause is the loss")
				var le *lock.LostError
				assert.ErrorAs(t, cause, &le, "the cause is a *LostError")
				return cause
			})
			assert.ErrorIs(t, err, lock.ErrLost, "Do reports the loss")
			assert.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventLost}, rec.kinds())
		})

		t.Run("ParentCancelled", func(t *testing.T) {
			name := uniqueName(t)
			pctx, cancel := context.WithCancel(ctx)
			err := c.Do(pctx, name, lock.Options{}, func(ctx context.Context) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			})
			assert.ErrorIs(t, err, context.Canceled)
			assert.NotErrorIs(t, err, lock.ErrLost, "a cancelled caller is not a lost lock")
			freeNow(t, name) // the release was not defeated by the cancelled ctx
		})

		t.Run("NilFunc", func(t *testing.T) {
			assert.ErrorIs(t, c.Do(ctx, uniqueName(t), lock.Options{}, nil), lock.ErrInvalidArgument)
		})
	})
}

func TestFencingTokensAcrossReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		var last uint64
		for i := range 20 {
			l, err := cs[i%2].Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			require.Greater(t, l.Token(), last, "grant %d: tokens strictly increase across replicas", i)
			last = l.Token()
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestExtend(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))
		l, err := c.Acquire(ctx, uniqueName(t), lock.Options{Lease: time.Second})
		require.NoError(t, err)
		assert.ErrorIs(t, l.Extend(ctx, 0), lock.ErrInvalidArgument, "Extend(0)")
		assert.ErrorIs(t, l.Extend(ctx, -time.Second), lock.ErrInvalidArgument, "Extend(negative)")
		require.NoError(t, l.Extend(ctx, time.Minute))
		assertTTL(t, time.Minute, holder(t, b.replica(t), l.Key()).TTL, "Extend sets the record's TTL")
		require.NoError(t, l.Extend(ctx, time.Hour))
		assertTTL(t, lock.DefaultMaxDuration, holder(t, b.replica(t), l.Key()).TTL, "Extend is cut to what is left of MaxDuration")
		require.NoError(t, l.Release(ctx))
		err = l.Extend(ctx, time.Second)
		assert.ErrorIs(t, err, lock.ErrReleased, "a released lock cannot be extended")
		assert.NotErrorIs(t, err, lock.ErrLost, "and it was not lost")
	})
}

func TestAcquireBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))
		name := uniqueName(t)
		long := strings.Repeat("n", lock.MaxKeyLen-len(lock.DefaultPrefix)+1)
		cases := []struct {
			what string
			name string
			o    lock.Options
		}{
			{"empty name", "", lock.Options{}},
			{"key over MaxKeyLen", long, lock.Options{}},
			{"negative MaxDuration", name, lock.Options{MaxDuration: -time.Second}},
			{"negative Lease", name, lock.Options{Lease: -time.Second}},
			{"negative GracePeriod", name, lock.Options{GracePeriod: -time.Second}},
			{"Lease under 3ms", name, lock.Options{Lease: time.Millisecond}},
		}
		for _, tc := range cases {
			_, err := c.Acquire(ctx, tc.name, tc.o)
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, tc.what)
			assert.ErrorIs(t, c.Do(ctx, tc.name, tc.o, func(context.Context) error {
				t.Errorf("fn ran for %s", tc.what)
				return nil
			}), lock.ErrInvalidArgument, tc.what)
		}
		for _, key := range []string{c.Key(name), c.Key(long)} {
			if b.raw != nil {
				n, err := b.raw.Exists(ctx, rawKey(key), queueKey(key)).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "nothing is stored for bad input")
			}
		}
		if m, ok := b.replica(t).(*lock.MemoryProvider); ok {
			assert.Zero(t, m.Len(), "nothing is stored for bad input")
		}
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "the name is free after the rejected calls")
		assert.NoError(t, l.Release(ctx))

		exact := name + strings.Repeat("n", lock.MaxKeyLen-len(c.Key(name)))
		l, err = c.Acquire(ctx, exact, lock.Options{})
		require.NoError(t, err, "a key of exactly MaxKeyLen bytes works")
		assert.NoError(t, l.Release(ctx))
	})
}

func TestNewClientNilProvider(t *testing.T) {
	c, err := lock.NewClient(nil)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
	assert.Nil(t, c)
}

func TestClosedClient(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c, err := lock.NewClient(b.replica(t))
		require.NoError(t, err)
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "Close is idempotent")

		_, err = c.Acquire(ctx, uniqueName(t), lock.Options{})
		assert.ErrorIs(t, err, lock.ErrClosed, "Acquire after Close")
		_, err = c.Acquire(ctx, uniqueName(t), lock.Options{Wait: true})
		assert.ErrorIs(t, err, lock.ErrClosed, "Acquire with Wait after Close")
		assert.ErrorIs(t, c.Do(ctx, uniqueName(t), lock.Options{}, func(context.Context) error { return nil }), lock.ErrClosed)
		assert.NoError(t, l.Err(), "a lock held at Close stays held")
		assert.NoError(t, l.Release(ctx), "a lock held at Close can still be released")
	})
}

func TestCloseWhileWaiting(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		holderC := newClient(t, b.replica(t))
		c, err := lock.NewClient(b.replica(t), rec.option(), lock.WithPollInterval(50*time.Millisecond))
		require.NoError(t, err)
		name := uniqueName(t)
		l, err := holderC.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, name, lock.Options{Wait: true})
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitEvent(t, rec, lock.EventContended)
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, c.Close(), "Close while a goroutine waits")
		require.NoError(t, l.Release(ctx))
		select {
		case err := <-got:
			if err != nil {
				assert.ErrorIs(t, err, lock.ErrClosed, "a wait begun before Close gets the lock (by polling) or ends with ErrClosed")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not finish within 10s")
		}
	})
}

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
	clock := newFakeClock()
	rec := newRecorder()
	c := newClient(t, lock.NewMemoryProvider(), lock.WithClock(clock), rec.option())
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

func TestReleaseFindsLockGone(t *testing.T) {
	// Alepha flaw 4: a release that finds the lock gone reports a loss,
	// never a clean release.
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		for _, grace := range []time.Duration{0, time.Second} {
			rec := newRecorder()
			c := newClient(t, b.replica(t), rec.option())
			other := newClient(t, b.replica(t))
			name := uniqueName(t)
			l, err := c.Acquire(ctx, name, lock.Options{GracePeriod: grace})
			require.NoError(t, err)
			deleteRecord(t, b, l)
			l2, err := other.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err, "the deleted lock is free for another replica")

			err = l.Release(ctx)
			assert.ErrorIs(t, err, lock.ErrLost, "grace %v: Release of a taken lock reports ErrLost", grace)
			var le *lock.LostError
			assert.ErrorAs(t, err, &le)
			assert.ErrorIs(t, l.Err(), lock.ErrLost, "grace %v: Err reports the loss after Release found it", grace)
			assertClosed(t, l.Done(), "Done is closed")
			kinds := rec.kinds()
			assert.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventLost}, kinds,
				"grace %v: Lost, never Released, for a lock found gone", grace)

			h := holder(t, b.replica(t), l2.Key())
			assert.Equal(t, l2.Owner(), h.Owner, "grace %v: the late release left the new holder's record", grace)
			assert.False(t, h.Ended, "grace %v: the late release did not end the new holder's record", grace)
			assert.NoError(t, l2.Release(ctx), "grace %v: the new holder still holds the lock", grace)
		}
	})
}

func TestPrefix(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		for _, prefix := range []string{"p:", ""} {
			c := newClient(t, b.replica(t), lock.WithPrefix(prefix))
			name := uniqueName(t)
			key := prefix + "{" + name + "}"
			assert.Equal(t, key, c.Key(name))
			l, err := c.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			assert.Equal(t, key, l.Key(), "the key is the prefix and the name in braces")
			h := holder(t, b.replica(t), key)
			assert.Equal(t, l.Owner(), h.Owner, "the record is stored under %q", key)
			assert.Equal(t, l.Token(), h.Token)
			if b.raw != nil {
				n, err := b.raw.Exists(ctx, key).Result()
				require.NoError(t, err)
				assert.EqualValues(t, 1, n, "the Redis record is at the key itself, %s", key)
				pttl, err := b.raw.PTTL(ctx, l.Key()).Result()
				require.NoError(t, err)
				assert.Positive(t, pttl, "PTTL of Lock.Key finds the record")
				keys, err := b.raw.Keys(ctx, globEscape(prefix)+"*"+globEscape(name)+"*").Result()
				require.NoError(t, err)
				for _, k := range keys {
					assert.True(t, strings.HasPrefix(k, prefix), "every stored key starts with the prefix: %q", k)
				}
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestMutualExclusion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, time.Minute)
		cs := replicas(t, b, 4)
		name := uniqueName(t)
		perG := 25
		if b.raw != nil {
			perG = 8
		}
		var inside, maxInside, grants atomic.Int64
		shared := 0 // guarded by the lock alone
		var wg sync.WaitGroup
		for _, c := range cs {
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perG {
						l, err := c.Acquire(ctx, name, lock.Options{Wait: true})
						if !assert.NoError(t, err) {
							return
						}
						n := inside.Add(1)
						for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
						}
						v := shared // unprotected read-modify-write
						runtime.Gosched()
						time.Sleep(50 * time.Microsecond)
						shared = v + 1
						grants.Add(1)
						inside.Add(-1)
						if !assert.NoError(t, l.Release(ctx)) {
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		assert.EqualValues(t, 1, maxInside.Load(), "at most one holder at any instant")
		assert.EqualValues(t, 16*perG, grants.Load(), "every acquisition was granted")
		assert.EqualValues(t, grants.Load(), shared, "no update was lost")
	})
}

func TestLocalFairness(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, time.Minute)
		c := newClient(t, b.replica(t))
		name := uniqueName(t)
		const workers = 8
		total := int64(400)
		if b.raw != nil {
			total = 160
		}
		var sections atomic.Int64
		var counts [workers]atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sections.Load() < total {
					l, err := c.Acquire(ctx, name, lock.Options{Wait: true})
					if !assert.NoError(t, err) {
						return
					}
					sections.Add(1)
					counts[w].Add(1)
					runtime.Gosched()
					if !assert.NoError(t, l.Release(ctx)) {
						return
					}
				}
			}()
		}
		wg.Wait()
		got := make([]int64, workers)
		for i := range counts {
			got[i] = counts[i].Load()
		}
		t.Logf("grants per goroutine: %v", got)
		for i, n := range got {
			assert.Positive(t, n, "goroutine %d got no grant: local waiters are served in arrival order", i)
			assert.GreaterOrEqual(t, n, total/workers/4, "goroutine %d got far fewer grants than its share (%v)", i, got)
		}
	})
}

// --- helpers ---

// deleteRecord removes l's record behind its back.
func deleteRecord(t testing.TB, b backend, l *lock.Lock) {
	t.Helper()
	if b.raw != nil {
		require.NoError(t, b.raw.Del(context.Background(), rawKey(l.Key())).Err())
		return
	}
	require.NoError(t, b.replica(t).Release(context.Background(), l.Key(), l.Owner()))
}

// waitEvent waits for an event of kind, dropping others.
func waitEvent(t testing.TB, r *recorder, kind lock.EventKind) lock.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-r.ch:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event within 10s", kind)
		}
	}
}

// drain returns the events recorded so far.
func drain(r *recorder) []lock.Event {
	var es []lock.Event
	for {
		select {
		case e := <-r.ch:
			es = append(es, e)
		default:
			return es
		}
	}
}

func assertClosed(t testing.TB, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Error(msg)
	}
}

// noListen is a provider whose Listen fails, as a pub/sub connection that
// cannot be opened.
type noListen struct{ lock.Provider }

func (noListen) Listen(context.Context, string, func(lock.Grant)) (func(), error) {
	return nil, errors.New("no pub/sub")
}

func TestWithoutListen(t *testing.T) {
	// Without grants delivered to its inbox, a waiter finds the lock by
	// looking again every poll interval.
	ctx := ctxTimeout(t, 30*time.Second)
	m := lock.NewMemoryProvider()
	c := newClient(t, noListen{m})
	other := newClient(t, noListen{m}, lock.WithPollInterval(100*time.Millisecond))
	name := uniqueName(t)

	l, err := c.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := other.Acquire(ctx, name, lock.Options{Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(150 * time.Millisecond) // the waiter is waiting
	require.NoError(t, l.Release(ctx))
	start := time.Now()
	select {
	case err := <-got:
		assert.NoError(t, err)
		assert.Less(t, time.Since(start), 2*time.Second, "the waiter gets the lock soon")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock within 10s")
	}
}

// blockingListen is a provider whose Listen hangs until its context ends, as
// go-redis's Receive does on a half-open connection.
type blockingListen struct {
	lock.Provider
	entered chan struct{}
}

func (b *blockingListen) Listen(ctx context.Context, _ string, _ func(lock.Grant)) (func(), error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestSlowSubscribeDoesNotBlockClient(t *testing.T) {
	// A waiter's subscription that hangs must not hold up the Client's other
	// acquisitions (or Close) for as long as it hangs.
	t.Parallel()
	ctx := ctxTimeout(t, 30*time.Second)
	m := lock.NewMemoryProvider()
	bt := &blockingListen{Provider: m, entered: make(chan struct{}, 1)}
	c := newClient(t, bt, lock.WithPollInterval(50*time.Millisecond))
	holderC := newClient(t, m)
	busy := uniqueName(t)
	l, err := holderC.Acquire(ctx, busy, lock.Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, l.Release(context.Background())) }()

	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = c.Acquire(ctx, busy, lock.Options{Wait: true, MaxDuration: 2 * time.Second})
	}()
	select {
	case <-bt.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not subscribe")
	}

	start := time.Now()
	l2, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
	elapsed := time.Since(start)
	require.NoError(t, err)
	assert.NoError(t, l2.Release(ctx))
	assert.Less(t, elapsed, time.Second,
		"Acquire of a free lock took %v: it waited for another waiter's hanging Subscribe", elapsed)
	<-waited
}

func TestRemoteWaiterNotStarved(t *testing.T) {
	// One process whose goroutines take the lock back to back must not keep a
	// waiter in another process out.
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		hot, remote := cs[0], cs[1]
		name := uniqueName(t)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var grants atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := hot.Acquire(ctx, name, lock.Options{Wait: true})
					if !assert.NoError(t, err) {
						return
					}
					grants.Add(1)
					time.Sleep(time.Millisecond)
					if !assert.NoError(t, l.Release(ctx)) {
						return
					}
				}
			}()
		}
		defer func() {
			close(stop)
			wg.Wait()
		}()
		require.Eventually(t, func() bool { return grants.Load() >= 20 }, 10*time.Second, time.Millisecond,
			"the hot process takes the lock")

		start := time.Now()
		l, err := remote.Acquire(ctx, name, lock.Options{Wait: true, MaxDuration: 5 * time.Second})
		require.NoError(t, err, "the remote waiter gets the lock within 5s while another process hammers it")
		t.Logf("remote waiter got the lock after %v (%d hot grants)", time.Since(start), grants.Load())
		assert.NoError(t, l.Release(ctx))
	})
}

func TestReleaseFindsLockGoneWithLocalWaiter(t *testing.T) {
	// A release that finds the lock gone while a waiter of the same Client is
	// queued reports the loss, and the waiter still gets the lock.
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		rec := newRecorder()
		c := newClient(t, b.replica(t), rec.option())
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		got := make(chan *lock.Lock, 1)
		go func() {
			l2, err := c.Acquire(ctx, name, lock.Options{Wait: true})
			assert.NoError(t, err, "the waiter gets the lock")
			got <- l2
		}()
		e := waitEvent(t, rec, lock.EventContended)
		time.Sleep(50 * time.Millisecond) // the waiter is queued
		// On Redis the deletion is silent and the waiter is still queued at
		// the release; the memory provider announces it, and the waiter may
		// take the lock first.
		deleteRecord(t, b, l)

		err = l.Release(ctx)
		assert.ErrorIs(t, err, lock.ErrLost, "Release of a deleted lock reports ErrLost")
		select {
		case l2 := <-got:
			if l2 != nil {
				assert.Equal(t, e.Owner, l2.Owner())
				assert.Greater(t, l2.Token(), l.Token())
				h := holder(t, b.replica(t), l2.Key())
				assert.Equal(t, l2.Owner(), h.Owner, "the waiter's record is stored")
				assert.NoError(t, l2.Release(ctx))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter did not get the lock within 5s")
		}
		var kinds []lock.EventKind
		for _, e := range drain(rec) {
			if e.Owner == l.Owner() {
				kinds = append(kinds, e.Kind)
			}
		}
		assert.Equal(t, []lock.EventKind{lock.EventLost}, kinds, "the first holder's release emits Lost, never Released")
	})
}

func TestDoneAskedFirstAfterTheEnd(t *testing.T) {
	// Done's channel is made by its first call: asked for the first time
	// after a release or a loss, it is closed already; asked twice, it is
	// the same channel.
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))

		l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		assertClosed(t, l.Done(), "Done asked first after Release is closed")

		l, err = c.Acquire(ctx, uniqueName(t), lock.Options{})
		require.NoError(t, err)
		ch := l.Done()
		assert.Equal(t, ch, l.Done(), "Done returns one channel")
		require.NoError(t, l.Release(ctx))
		assertClosed(t, ch, "the channel asked for before Release is closed by it")

		// Lost: the record vanishes, and the next renewal (a third of the
		// lease) finds it gone.
		l, err = c.Acquire(ctx, uniqueName(t), lock.Options{Lease: 600 * time.Millisecond})
		require.NoError(t, err)
		deleteRecord(t, b, l)
		require.Eventually(t, func() bool { return l.Err() != nil }, 10*time.Second, 10*time.Millisecond, "the loss is found")
		assert.ErrorIs(t, l.Err(), lock.ErrLost)
		assertClosed(t, l.Done(), "Done asked first after the loss is closed")
	})
}

// ctxProvider is a memory provider whose Release hands its context to seen
// and, with hang, waits for that context to end.
type ctxProvider struct {
	lock.Provider
	seen chan context.Context
	hang bool
}

func (p ctxProvider) Release(ctx context.Context, key, owner string) error {
	p.seen <- ctx
	if p.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Provider.Release(ctx, key, owner)
}

type ctxTag struct{}

// Release runs on a context of its own: the caller's values, not its
// cancellation, and a deadline of at most the release timeout.
func TestReleaseContext(t *testing.T) {
	p := ctxProvider{Provider: lock.NewMemoryProvider(), seen: make(chan context.Context, 1)}
	c := newClient(t, p, lock.WithReleaseTimeout(time.Minute))
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxTag{}, "request-7"))
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
	require.NoError(t, err)
	cancel(errors.New("the request ended"))
	began := time.Now()
	require.NoError(t, l.Release(ctx), "a cancelled caller's release goes through")
	rctx := <-p.seen
	assert.Equal(t, "request-7", rctx.Value(ctxTag{}), "the caller's values reach the provider")
	assert.NoError(t, rctx.Err(), "the caller's cancellation does not")
	assert.NoError(t, context.Cause(rctx), "nor its cause")
	deadline, ok := rctx.Deadline()
	require.True(t, ok, "a release has a deadline")
	assert.WithinRange(t, deadline, began.Add(50*time.Second), began.Add(time.Minute+time.Second),
		"the deadline is between nine tenths of the release timeout and the whole of it")
}

// A release whose provider never answers gives up at the release timeout.
func TestReleaseTimeoutEndsAHangingRelease(t *testing.T) {
	p := ctxProvider{Provider: lock.NewMemoryProvider(), seen: make(chan context.Context, 2), hang: true}
	c := newClient(t, p, lock.WithReleaseTimeout(300*time.Millisecond))
	for i := range 2 { // the second shares the first's deadline, or has one of its own
		ctx, cancel := context.WithCancelCause(context.Background())
		l, err := c.Acquire(ctx, uniqueName(t)+strconv.Itoa(i), lock.Options{})
		require.NoError(t, err)
		cancel(errors.New("the request ended"))
		began := time.Now()
		err = l.Release(ctx)
		took := time.Since(began)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "release %d", i)
		assert.GreaterOrEqual(t, took, 250*time.Millisecond, "release %d ended before nine tenths of the timeout", i)
		assert.Less(t, took, 10*time.Second, "release %d hung past its timeout", i)
		rctx := <-p.seen
		assert.Equal(t, context.DeadlineExceeded, context.Cause(rctx), "release %d: the cause is its own deadline, not the caller's", i)
	}
}

// The lease timers of one Client's locks share a runtime timer: a lock with
// a short lease, taken while one with a long lease is held, or after another
// was released, is still renewed on time.
func TestLeaseTimersOfOneClient(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	c := newClient(t, lock.NewMemoryProvider())
	long, err := c.Acquire(ctx, uniqueName(t)+"-long", lock.Options{Lease: time.Minute})
	require.NoError(t, err)
	defer long.Release(ctx)
	for _, name := range []string{"-short", "-after"} { // "-after" comes after "-short" was released
		l, err := c.Acquire(ctx, uniqueName(t)+name, lock.Options{Lease: 300 * time.Millisecond})
		require.NoError(t, err)
		time.Sleep(time.Second) // three leases: renewed about nine times
		assert.NoError(t, l.Err(), "%s: the short lease was not renewed", name)
		assert.NoError(t, l.Release(ctx), name)
	}
	assert.NoError(t, long.Err())
}

// Many locks of one Client taken, extended and released at once, with leases
// short enough to be renewed a few times each: every hold is renewed on time
// (the shared lease timer keeps its heap right under churn).
func TestLeaseTimersUnderChurn(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	c := newClient(t, lock.NewMemoryProvider())
	base := uniqueName(t)
	var wg sync.WaitGroup
	var holds atomic.Int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(3 * time.Second)
			for i := 0; time.Now().Before(end); i++ {
				lease := time.Duration(400+(g*37+i*53)%400) * time.Millisecond
				l, err := c.Acquire(ctx, base+strconv.Itoa(g)+"-"+strconv.Itoa(i%3), lock.Options{Lease: lease})
				if !assert.NoError(t, err) {
					return
				}
				hold := time.Duration((g*71+i*29)%1200) * time.Millisecond
				if i%4 == 0 {
					assert.NoError(t, l.Extend(ctx, lease), "extend")
				}
				time.Sleep(hold)
				assert.NoError(t, l.Release(ctx), "a hold of %v with a lease of %v was not renewed on time", hold, lease)
				holds.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d holds", holds.Load())
}
