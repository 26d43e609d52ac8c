package lock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// slowRelease is a provider whose releases (and grace-period writes) take d
// before they reach the provider, as over a slow network.
type slowRelease struct {
	lock.Provider
	d time.Duration
}

func (p slowRelease) Release(ctx context.Context, key, owner string) error {
	time.Sleep(p.d)
	return p.Provider.Release(ctx, key, owner)
}

func (p slowRelease) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	time.Sleep(p.d)
	return p.Provider.Finish(ctx, key, owner, ttl)
}

// Issue 23, item 1: Done closed before the outcome was known. A Release that
// finds the lock taken by another owner closes Done only once Err says so: a
// watcher that reads Err right after Done sees the loss, never a clean end.
func TestDoneAfterReleaseSaysTheOutcome(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		for _, grace := range []time.Duration{0, time.Second} {
			c := newClient(t, slowRelease{b.replica(t), 100 * time.Millisecond})
			other := newClient(t, b.replica(t))
			name := uniqueName(t)
			l, err := c.Acquire(ctx, name, lock.Options{GracePeriod: grace})
			require.NoError(t, err)
			_, err = other.ForceRelease(ctx, name)
			require.NoError(t, err)
			l2, err := other.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err, "the forced-released lock is free for another owner")

			seen := make(chan error, 1)
			done := l.Done()
			go func() {
				<-done
				seen <- l.Err()
			}()
			err = l.Release(ctx)
			require.ErrorIs(t, err, lock.ErrLost, "grace %v: the release finds the lock taken", grace)
			select {
			case werr := <-seen:
				assert.ErrorIs(t, werr, lock.ErrLost, "grace %v: Err read right after Done says the lock was lost", grace)
				assert.Equal(t, err, werr, "grace %v: Err says what Release returned", grace)
			case <-time.After(10 * time.Second):
				t.Fatalf("grace %v: Done was not closed after Release returned", grace)
			}
			var le *lock.LostError
			if assert.ErrorAs(t, err, &le) {
				assert.Equal(t, lock.LostTaken, le.Reason, "grace %v: the release found another owner before the lease ran out", grace)
				assert.Equal(t, l2.Owner(), le.Holder, "grace %v: the holder found is the new owner", grace)
			}
			require.NoError(t, l2.Release(ctx), "grace %v: the new owner still holds the lock", grace)
		}
	})
}

// Two Releases at once: the second waits for the first's outcome and says
// the same, a loss here, never a clean release while the first one asks.
func TestConcurrentReleasesSayTheOutcome(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	mem := lock.NewMemoryProvider()
	c := newClient(t, slowRelease{mem, 200 * time.Millisecond})
	other := newClient(t, mem)
	name := uniqueName(t)
	l, err := c.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	_, err = other.ForceRelease(ctx, name)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Release(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		assert.ErrorIs(t, err, lock.ErrLost, "Release %d says the lock was lost", i)
	}
	assert.Equal(t, errs[0], errs[1], "both Releases say the same")
}

// Issue 22, item 2: a loss says why, in the LostError and in the cause of
// the handler's context. The record removed before the lease ran out (a
// forced release), or removed and taken by another owner, are told apart.
func TestLossSaysWhy(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		for _, taken := range []bool{false, true} {
			c := newClient(t, b.replica(t))
			other := newClient(t, b.replica(t), lock.WithIdentity("worker-2"))
			name := uniqueName(t)
			var l2 *lock.Lock
			var cause error
			err := c.Do(ctx, name, lock.Options{Lease: 30 * time.Second}, func(ctx context.Context) error {
				_, err := other.ForceRelease(ctx, name)
				require.NoError(t, err)
				if taken {
					l2, err = other.Acquire(ctx, name, lock.Options{})
					require.NoError(t, err)
				}
				l, _ := lock.FromContext(ctx)
				// Extend renews now: the renewal finds the record gone or taken.
				assert.ErrorIs(t, l.Extend(ctx, time.Minute), lock.ErrLost, "taken %v: Extend finds the loss", taken)
				<-ctx.Done()
				cause = context.Cause(ctx)
				return cause
			})
			require.ErrorIs(t, err, lock.ErrLost, "taken %v", taken)
			var le, ce *lock.LostError
			require.ErrorAs(t, err, &le)
			require.ErrorAs(t, cause, &ce, "taken %v: the handler's context's cause is the LostError", taken)
			assert.Same(t, le, ce, "taken %v: Do returns the cause of the handler's context", taken)
			if taken {
				assert.Equal(t, lock.LostTaken, le.Reason, "the renewal found another owner")
				assert.Equal(t, l2.Owner(), le.Holder)
				assert.Contains(t, le.Error(), "another owner holds it (worker-2)", "the message names the holder's identity")
				require.NoError(t, l2.Release(ctx))
			} else {
				assert.Equal(t, lock.LostRemoved, le.Reason, "the renewal found the key free")
				assert.Empty(t, le.Holder)
			}
			assert.Contains(t, le.Error(), "removed before its lease ran out (a forced release, or the server lost it)", "taken %v", taken)
			assert.NoError(t, le.Cause, "taken %v: nothing failed", taken)
		}
	})
}

// hangingUpdate is a provider whose renewals never answer, until the test
// ends, whatever their context says.
type hangingUpdate struct {
	lock.Provider
	stop chan struct{}
}

func (p hangingUpdate) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	<-p.stop
	return errors.New("no answer")
}

// The lease running out says whether renewals failed (the provider
// unreachable) or never came back (the lease ran out), and MaxDuration says
// so.
func TestLossByTheHoldersClock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	mem := lock.NewMemoryProvider()
	lease := 300 * time.Millisecond
	wait := func(t *testing.T, l *lock.Lock) *lock.LostError {
		t.Helper()
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the loss was not found within 10s")
		}
		var le *lock.LostError
		require.ErrorAs(t, l.Err(), &le)
		return le
	}

	t.Run("unreachable", func(t *testing.T) {
		p := &flakyUpdate{Provider: mem}
		p.fail.Store(true)
		c := newClient(t, p)
		l, err := c.Acquire(ctx, uniqueName(t), lock.Options{Lease: lease})
		require.NoError(t, err)
		le := wait(t, l)
		assert.Equal(t, lock.LostUnreachable, le.Reason)
		assert.ErrorContains(t, le, "connection refused", "the message says the provider's last error")
		assert.ErrorContains(t, le, "the lease ran out before it was renewed")
		_ = l.Release(ctx)
	})
	t.Run("lease ran out", func(t *testing.T) {
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		c := newClient(t, hangingUpdate{mem, stop})
		l, err := c.Acquire(ctx, uniqueName(t), lock.Options{Lease: lease})
		require.NoError(t, err)
		le := wait(t, l)
		assert.Equal(t, lock.LostLeaseRanOut, le.Reason)
		assert.EqualError(t, le, `lock: lost "`+l.Key()+`" (token `+strconv.FormatUint(l.Token(), 10)+`): the lease ran out before it was renewed`)
		_ = l.Release(ctx)
	})
	t.Run("max duration", func(t *testing.T) {
		c := newClient(t, mem)
		l, err := c.Acquire(ctx, uniqueName(t), lock.Options{MaxDuration: lease})
		require.NoError(t, err)
		le := wait(t, l)
		assert.Equal(t, lock.LostMaxDuration, le.Reason)
		assert.ErrorContains(t, le, "MaxDuration")
	})
}

// Issue 22, item 2: a loss is logged at warning level, with the lock, the
// token, how long it was held and why; a forced release is told apart from
// a lease that ran out.
func TestLossLoggedAtWarning(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mem := lock.NewMemoryProvider()
	c := newClient(t, mem, lock.WithLogger(log))
	other := newClient(t, mem, lock.WithIdentity("worker-2"))
	name := uniqueName(t)
	l, err := c.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	_, err = other.ForceRelease(ctx, name)
	require.NoError(t, err)
	l2, err := other.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	require.ErrorIs(t, l.Extend(ctx, time.Minute), lock.ErrLost)

	out := buf.String()
	assert.Contains(t, out, `level=WARN msg="lock: lost"`, "a loss is logged at warning level")
	assert.Contains(t, out, "key="+l.Key())
	assert.Contains(t, out, "token="+strconv.FormatUint(l.Token(), 10))
	assert.Contains(t, out, "held=")
	assert.Contains(t, out, `reason="taken by another owner"`)
	assert.Contains(t, out, "holder="+l2.Owner())
	assert.NotContains(t, out, "<nil>", "no empty cause is logged")
	require.NoError(t, l2.Release(ctx))
}

// Issue 22, item 7: Extend after Release is a use of a released lock, not a
// loss; so is a second Release after a clean one.
func TestReleasedLockIsNotLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))
		l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))

		err = l.Extend(ctx, time.Minute)
		assert.ErrorIs(t, err, lock.ErrReleased, "Extend after Release")
		assert.NotErrorIs(t, err, lock.ErrLost, "Extend after Release is not a loss")
		assert.EqualError(t, err, `lock: extend "`+l.Key()+`": already released`)

		err = l.Release(ctx)
		assert.ErrorIs(t, err, lock.ErrReleased, "Release after Release")
		assert.NotErrorIs(t, err, lock.ErrLost, "Release after Release is not a loss")
		assert.EqualError(t, err, `lock: release "`+l.Key()+`": already released`)
		assert.NoError(t, l.Err(), "the lock was released cleanly")
	})
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

// syncBuffer is a bytes.Buffer safe for the log's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the lines of the buffer that contain s.
func (b *syncBuffer) lines(s string) []string {
	var found []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, s) {
			found = append(found, line)
		}
	}
	return found
}
