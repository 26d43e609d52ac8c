package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Client.Do: the lock held while fn runs, released after, and a loss
// reported through fn's context and Do's error.

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

// Issue 7, item 7 (was TestIssue7DoLostOnce): when the lock is lost while fn
// runs, Do returns an error matching ErrLost whose message says so once,
// whatever fn returns.
func TestDoReportsLossOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// waitLoss makes fn wait until its context reports the loss.
		waitLoss bool
		ret      func(ctx context.Context) error
	}{
		{"returns-cause", true, func(ctx context.Context) error { return context.Cause(ctx) }},
		{"returns-wrapped-cause", true, func(ctx context.Context) error { return fmt.Errorf("work: %w", context.Cause(ctx)) }},
		{"returns-ctx-err", true, func(ctx context.Context) error { return ctx.Err() }},
		{"returns-nil-after-loss", true, func(context.Context) error { return nil }},
		{"returns-own-error", true, func(context.Context) error { return errors.New("work failed") }},
		{"returns-before-noticed", false, func(context.Context) error { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			mem := lock.NewMemoryProvider()
			c := newClient(t, mem)
			name := uniqueName(t)
			err := c.Do(ctx, name, lock.Options{Lease: 300 * time.Millisecond}, func(ctx context.Context) error {
				l, ok := lock.FromContext(ctx)
				require.True(t, ok)
				// Delete the record behind the holder's back.
				require.NoError(t, mem.Release(context.Background(), l.Key(), l.Owner()))
				if tc.waitLoss {
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
						return errors.New("the loss was not noticed within 5s of a 300ms lease")
					}
					require.ErrorIs(t, context.Cause(ctx), lock.ErrLost)
				}
				return tc.ret(ctx)
			})
			require.Error(t, err)
			t.Logf("Do: %v", err)
			assert.ErrorIs(t, err, lock.ErrLost)
			var lost *lock.LostError
			assert.ErrorAs(t, err, &lost)
			assert.Equal(t, 1, strings.Count(err.Error(), `lost "`), "the loss is said once: %q", err)
		})
	}
}

// A handler that releases its lock itself: Do's own release is not an
// error.
func TestDoHandlerReleasesItsLock(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newClient(t, lock.NewMemoryProvider())
	err := c.Do(ctx, uniqueName(t), lock.Options{}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		return l.Release(ctx)
	})
	assert.NoError(t, err)
}

// TestDoDoesNotRunOnALockGrantedTooLate: the provider answers an
// acquisition after the lease it asked for has run out: the record may have
// expired and been granted to another. Do must not run the function under
// that lock. It was never held, so it is not a loss either (issue 31, item
// 8: it was reported as a *LostError, logged at WARN as "lock: lost"): Do
// returns a *NotAcquiredError that says so, emits no EventAcquired or
// EventLost, and has released the record when it returns.
func TestDoDoesNotRunOnALockGrantedTooLate(t *testing.T) {
	mem := lock.NewMemoryProvider()
	slow := &hookedProvider{Provider: mem, OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
		rec, err := mem.Acquire(ctx, key, owner, ttl)
		time.Sleep(3 * ttl) // the reply arrives after the lease ran out
		return rec, err
	}}
	rec := newRecorder()
	c := newClient(t, slow, rec.option())
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	ran := false
	err := c.Do(ctx, name, lock.Options{Lease: 20 * time.Millisecond}, func(ctx context.Context) error {
		ran = true
		return nil
	})
	assert.False(t, ran, "the function ran under a lock whose lease had run out before it was granted")
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.NotErrorIs(t, err, lock.ErrLost, "a grant never held is not a loss")
	assert.NotErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorIs(t, err, lock.ErrGrantedLate)
	kinds := rec.kinds()
	assert.NotContains(t, kinds, lock.EventAcquired, "a grant never held: %v", kinds)
	assert.NotContains(t, kinds, lock.EventLost, "a grant never held: %v", kinds)
	st, err := newClient(t, mem).Inspect(ctx, name)
	require.NoError(t, err)
	assert.True(t, st.Free(), "the late grant was handed back before Do returned")
}
