package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// A Client: NewClient's checks, and Close.

func TestNewClientNilProvider(t *testing.T) {
	c, err := lock.NewClient(nil)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
	assert.Nil(t, c)
}

func TestWithIdentityBadInput(t *testing.T) {
	for _, id := range []string{"a b", "a,b", "a\tb", strings.Repeat("x", lock.MaxIdentityLen+1)} {
		_, err := lock.NewClient(lock.NewMemoryProvider(), lock.WithIdentity(id))
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "identity %q", id)
	}
	c := newClient(t, lock.NewMemoryProvider(), lock.WithIdentity(strings.Repeat("x", lock.MaxIdentityLen)))
	l, err := c.Acquire(context.Background(), "n", lock.Options{})
	require.NoError(t, err, "the longest identity makes a valid owner")
	require.NoError(t, l.Release(context.Background()))
	for _, name := range []string{"", strings.Repeat("n", lock.MaxKeyLen)} {
		_, err := c.Inspect(context.Background(), name)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Inspect of a %d-byte name", len(name))
		_, err = c.ForceRelease(context.Background(), name)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "ForceRelease of a %d-byte name", len(name))
	}
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

// keepInboxes returns a provider that passes every call on to mem, but
// keeps an inbox registered after its stop is called (until the test ends):
// a grant is still handed to a waiter whose Client has closed, as on a Redis
// Cluster, where PUBLISH cannot tell that nobody listens. A closed waiter
// left in the wait queue then gets the lock, and holds it for nobody.
func keepInboxes(t testing.TB, mem lock.Provider) *hookedProvider {
	return &hookedProvider{Provider: mem, OnListen: func(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
		stop, err := mem.Listen(ctx, inbox, deliver)
		if err != nil {
			return nil, err
		}
		t.Cleanup(stop)
		return func() {}, nil
	}}
}

// Issue 7, item 2 (was TestIssue7CloseWakesWaiters): Close wakes every waiter
// of the Client with an error matching ErrClosed, promptly; none of them
// acquires afterwards; they leave the provider's queue, so that the release
// hands the lock at once to a live waiter of another Client (whose poll
// interval is too long to find it otherwise); Acquire after Close fails with
// ErrClosed.
func TestCloseWakesWaiters(t *testing.T) {
	run := func(t *testing.T, closing, other func(t testing.TB) lock.Provider) {
		ctx := ctxTimeout(t, 30*time.Second)
		name := uniqueName(t)
		holderC := newClient(t, other(t))
		hl, err := holderC.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)

		// The Client that closes, with three waiters queued first; a short
		// poll interval so that a waiter that keeps polling after Close
		// would soon acquire.
		rec := newRecorder()
		c, err := lock.NewClient(closing(t), rec.option(), lock.WithPollInterval(20*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		// Ends the waits before the Close above when the test fails early.
		wctx, wcancel := context.WithCancel(ctx)
		t.Cleanup(wcancel)
		const n = 3
		results := make(chan error, n)
		for range n {
			go func() {
				l, err := c.Acquire(wctx, name, lock.Options{Wait: true, MaxDuration: time.Minute})
				if err == nil {
					_ = l.Release(context.Background())
					err = errors.New("acquired through a closed Client")
				}
				results <- err
			}()
		}
		for range n {
			waitEvent(t, rec, lock.EventContended)
		}

		// A live waiter in another Client, queued behind them. Only the
		// handoff at release can wake it within its 10s poll interval.
		liveRec := newRecorder()
		live := newClient(t, other(t), liveRec.option(), lock.WithPollInterval(10*time.Second))
		t.Cleanup(wcancel) // before live's Close, too
		liveGot := testenv.AcquireLater(wctx, live, name, lock.Options{Wait: true, MaxDuration: time.Minute})
		waitEvent(t, liveRec, lock.EventContended)

		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(2 * time.Second):
			t.Fatal("Close with waiters did not return within 2s")
		}
		released := time.Now()
		require.NoError(t, hl.Release(ctx), "the holder releases right after Close")

		for i := range n {
			select {
			case err := <-results:
				assert.ErrorIs(t, err, lock.ErrClosed, "waiter %d of the closed Client", i)
				assert.ErrorIs(t, err, lock.ErrNotAcquired, "waiter %d of the closed Client", i)
				var na *lock.NotAcquiredError
				assert.ErrorAs(t, err, &na, "waiter %d of the closed Client", i)
			case <-time.After(2 * time.Second):
				t.Fatalf("waiter %d of the closed Client still blocked 2s after Close", i)
			}
		}

		select {
		case r := <-liveGot:
			require.NoError(t, r.Err, "the live waiter of another Client gets the lock")
			wait := r.At.Sub(released)
			assert.Less(t, wait, 3*time.Second,
				"the live waiter got the lock %v after the release: the handoff went to a closed waiter left in the queue", wait)
			assert.Greater(t, r.Lock.Token(), hl.Token())
			assert.NoError(t, r.Lock.Release(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the live waiter did not get the lock within 5s of the release (poll interval 10s): " +
				"a closed waiter kept its place in the queue")
		}

		_, err = c.Acquire(ctx, uniqueName(t), lock.Options{})
		assert.ErrorIs(t, err, lock.ErrClosed, "Acquire after Close")
		_, err = c.Acquire(ctx, name, lock.Options{Wait: true})
		assert.ErrorIs(t, err, lock.ErrClosed, "Acquire with Wait after Close")

		skipped := 0
		for _, e := range drain(rec) {
			assert.NotEqual(t, lock.EventAcquired, e.Kind, "the closed Client acquired %q", e.Key)
			if e.Kind == lock.EventSkipped {
				skipped++
				assert.ErrorIs(t, e.Err, lock.ErrClosed)
			}
		}
		assert.Equal(t, n, skipped, "each woken waiter reports EventSkipped")
	}

	eachBackend(t, func(t *testing.T, b backend) {
		run(t, b.replica, b.replica)
	})
	t.Run("memory-inbox-kept", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		run(t,
			func(t testing.TB) lock.Provider { return keepInboxes(t, mem) },
			func(testing.TB) lock.Provider { return mem })
	})
}
