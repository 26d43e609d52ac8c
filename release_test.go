package lock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// Release: its context and timeout, a second Release, a Release that finds
// the lock gone, and Done after the end.

// ctxProvider returns a provider over p whose Release hands its context to
// seen and, with hang, waits for that context to end.
func ctxProvider(p lock.Provider, seen chan<- context.Context, hang bool) *hookedProvider {
	return &hookedProvider{Provider: p, OnRelease: func(ctx context.Context, key, owner string) error {
		seen <- ctx
		if hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return p.Release(ctx, key, owner)
	}}
}

type ctxTag struct{}

// Release runs on a context of its own: the caller's values, not its
// cancellation, and a deadline of at most the release timeout.
func TestReleaseContext(t *testing.T) {
	seen := make(chan context.Context, 1)
	c := newClient(t, ctxProvider(lock.NewMemoryProvider(), seen, false), lock.WithReleaseTimeout(time.Minute))
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxTag{}, "request-7"))
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
	require.NoError(t, err)
	cancel(errors.New("the request ended"))
	began := time.Now()
	require.NoError(t, l.Release(ctx), "a cancelled caller's release goes through")
	rctx := <-seen
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
	seen := make(chan context.Context, 2)
	c := newClient(t, ctxProvider(lock.NewMemoryProvider(), seen, true), lock.WithReleaseTimeout(300*time.Millisecond))
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
		rctx := <-seen
		assert.Equal(t, context.DeadlineExceeded, context.Cause(rctx), "release %d: the cause is its own deadline, not the caller's", i)
	}
}

// A release whose provider ignores its context returns by the caller's
// deadline and a moment (settleSlack, 50 ms), well before the release
// timeout, with an error matching ErrUnavailable and DeadlineExceeded; the
// release goes on in the background, Close waits for it, and it frees the
// lock once the provider answers.
func TestReleaseReturnsByTheCallersDeadline(t *testing.T) {
	unblock := make(chan struct{})
	mem := lock.NewMemoryProvider()
	p := &hookedProvider{Provider: mem, OnRelease: func(_ context.Context, key, owner string) error {
		select { // a provider that does not answer, whatever the context says
		case <-unblock:
		case <-time.After(10 * time.Second): // so that a failure does not hang the test
		}
		return mem.Release(context.Background(), key, owner)
	}}
	c, err := lock.NewClient(p, lock.WithReleaseTimeout(time.Minute))
	require.NoError(t, err)
	name := uniqueName(t)
	l, err := c.Acquire(context.Background(), name, lock.Options{})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = l.Release(ctx)
	took := time.Since(began)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// 350 ms expected; the bound leaves a loaded machine room, and is far
	// below the release timeout that an unbounded wait would reach.
	assert.Less(t, took, 3*time.Second, "Release returned %v after its deadline of 300ms", took)

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the release was under way", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(unblock)
	require.NoError(t, <-closed)
	rec, err := mem.Inspect(context.Background(), c.Key(name))
	require.NoError(t, err)
	assert.Empty(t, rec.Owner, "the release that went on in the background freed the lock")
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

// Regression (fixed in dadd9cd): a Release that failed (the provider was
// unreachable) is not reported clean by a second Release: it returns the first
// one's error.
func TestSecondReleaseRepeatsFailure(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var fail atomic.Bool
	c := newClient(t, &hookedProvider{Provider: mem, OnRelease: func(ctx context.Context, key, owner string) error {
		if fail.Load() {
			return errReleaseDown
		}
		return mem.Release(ctx, key, owner)
	}})
	ctx := ctxTimeout(t, 5*time.Second)
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
	require.NoError(t, err)
	fail.Store(true)
	first := l.Release(ctx)
	require.ErrorIs(t, first, errReleaseDown)
	assert.Equal(t, first, l.Release(ctx), "a second Release says the first failed")
	assert.NoError(t, l.Err(), "a failed release is not a loss")
}

var errReleaseDown = errors.New("provider down")

// Issue 23, item 1: two Releases at once: the second waits for the first's
// outcome and says the same, a loss here, never a clean release while the
// first one asks.
func TestConcurrentReleasesSayTheOutcome(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	mem := lock.NewMemoryProvider()
	c := newClient(t, testenv.SlowRelease(mem, 200*time.Millisecond))
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
			assert.False(t, h.GracePeriod, "grace %v: the late release did not end the new holder's record", grace)
			assert.NoError(t, l2.Release(ctx), "grace %v: the new holder still holds the lock", grace)
		}
	})
}

func TestReleaseFindsLockGoneWithLocalWaiter(t *testing.T) {
	testenv.SkipShort(t, "2 s on three backends")
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
		acquire := func(opts lock.Options) *lock.Lock { // a lock of its own each time
			l, err := c.Acquire(ctx, uniqueName(t), opts)
			require.NoError(t, err)
			return l
		}

		l := acquire(lock.Options{})
		require.NoError(t, l.Release(ctx))
		assertClosed(t, l.Done(), "Done asked first after Release is closed")

		l = acquire(lock.Options{})
		ch := l.Done()
		assert.Equal(t, ch, l.Done(), "Done returns one channel")
		require.NoError(t, l.Release(ctx))
		assertClosed(t, ch, "the channel asked for before Release is closed by it")

		// Lost: the record vanishes, and the next renewal (a third of the
		// lease) finds it gone.
		l = acquire(lock.Options{Lease: 600 * time.Millisecond})
		deleteRecord(t, b, l)
		require.Eventually(t, func() bool { return l.Err() != nil }, 10*time.Second, 10*time.Millisecond, "the loss is found")
		assert.ErrorIs(t, l.Err(), lock.ErrLost)
		assertClosed(t, l.Done(), "Done asked first after the loss is closed")
	})
}
