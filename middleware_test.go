package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// The tests of this file port Alepha's middleware test (alepha-behaviour.md,
// test 11) to lock.Middleware. HTTPMiddleware's are in http_test.go.

type mwOrder struct {
	ID  string
	Qty int
}

// Middleware returns the handler's result and passes the argument through.
func TestMiddleware_PassesArgumentAndResult(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := newClient(t, b.replica(t))
		name := uniqueName(t)
		var got mwOrder
		var inLock bool
		wrapped, err := lock.Middleware(c, func(ctx context.Context, o mwOrder) (string, error) {
			got = o
			_, inLock = lock.FromContext(ctx)
			return o.ID + ":" + strconv.Itoa(o.Qty*2), nil
		}, lock.MiddlewareOptions[mwOrder]{Name: name})
		require.NoError(t, err)

		res, err := wrapped(ctxTimeout(t, 5*time.Second), mwOrder{ID: "o1", Qty: 21})

		require.NoError(t, err, "a call on a free lock should succeed")
		assert.Equal(t, "o1:42", res, "the handler's result should be returned")
		assert.Equal(t, mwOrder{ID: "o1", Qty: 21}, got, "the argument should reach the handler unchanged")
		assert.True(t, inLock, "the handler's context should carry the lock")
	})
}

// The handler's error, and the result it returned with it, pass through, and
// the lock is free afterwards.
func TestMiddleware_HandlerErrorPassesThrough(t *testing.T) {
	errBoom := errors.New("boom")
	eachBackend(t, func(t *testing.T, b backend) {
		c := newClient(t, b.replica(t))
		ctx := ctxTimeout(t, 5*time.Second)
		wrapped, err := lock.Middleware(c, func(_ context.Context, fail bool) (int, error) {
			if fail {
				return 7, errBoom
			}
			return 1, nil
		}, lock.MiddlewareOptions[bool]{Name: uniqueName(t)})
		require.NoError(t, err)

		res, err := wrapped(ctx, true)
		assert.ErrorIs(t, err, errBoom, "the handler's error should reach the caller")
		assert.NotErrorIs(t, err, lock.ErrNotAcquired, "a failed handler is not a failed acquisition")
		assert.Equal(t, 7, res, "the result returned with the error should pass through")

		res, err = wrapped(ctx, false)
		assert.NoError(t, err, "the lock should be free after a failed call")
		assert.Equal(t, 1, res)
	})
}

// A panicking handler releases the lock; the panic reaches the caller.
func TestMiddleware_PanicReleasesLock(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ctx := ctxTimeout(t, 5*time.Second)
	wrapped, err := lock.Middleware(c, func(_ context.Context, panics bool) (int, error) {
		if panics {
			panic("handler panic")
		}
		return 1, nil
	}, lock.MiddlewareOptions[bool]{Name: uniqueName(t)})
	require.NoError(t, err)

	assert.PanicsWithValue(t, "handler panic", func() { _, _ = wrapped(ctx, true) }, "the handler's panic should reach the caller")
	_, err = wrapped(ctx, false)
	assert.NoError(t, err, "the lock should be free after a panicking call")
}

// NameFunc gives a lock per argument.
func TestMiddleware_DynamicName(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		base := uniqueName(t)
		cs := replicas(t, b, 2)
		ctx := ctxTimeout(t, 5*time.Second)
		var keys []string
		wrapped, err := lock.Middleware(cs[1], func(ctx context.Context, o mwOrder) (string, error) {
			if l, ok := lock.FromContext(ctx); ok {
				keys = append(keys, l.Key())
			}
			return o.ID, nil
		}, lock.MiddlewareOptions[mwOrder]{NameFunc: func(o mwOrder) string { return base + ":order:" + o.ID }})
		require.NoError(t, err)
		mustHold(t, cs[0], base+":order:1")

		_, err = wrapped(ctx, mwOrder{ID: "1"})
		assert.ErrorIs(t, err, lock.ErrHeld, "order 1's lock is held elsewhere")
		res, err := wrapped(ctx, mwOrder{ID: "2"})
		assert.NoError(t, err, "order 2 has a lock of its own")
		assert.Equal(t, "2", res)
		assert.Equal(t, []string{cs[1].Key(base + ":order:2")}, keys, "only order 2 should run, under its own key")
	})
}

// A held key fails the call with a NotAcquiredError naming it, without running
// the handler (Alepha: LockAcquireError "could not acquire lock '<name>'").
func TestMiddleware_HeldKeyFails(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		cs := replicas(t, b, 2)
		mustHold(t, cs[0], name)
		var runs atomic.Int32
		wrapped, err := lock.Middleware(cs[1], func(context.Context, int) (int, error) { runs.Add(1); return 1, nil },
			lock.MiddlewareOptions[int]{Name: name})
		require.NoError(t, err)

		res, err := wrapped(ctxTimeout(t, 5*time.Second), 1)

		assert.ErrorIs(t, err, lock.ErrNotAcquired, "a held key should fail the call")
		assert.ErrorIs(t, err, lock.ErrHeld, "the reason should be that the key is held")
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), cs[1].Key(name), "the message should name the key")
		}
		assert.Zero(t, res, "a call that did not run returns the zero result")
		assert.Zero(t, runs.Load(), "the handler must not run without the lock")
	})
}

// mwConcurrentCalls makes three concurrent calls on one wrapped handler with
// a 30 ms body and returns their errors and the probe of the body. Without
// Wait the body holds on until the other calls have returned, so that exactly
// one can succeed however the goroutines are scheduled.
func mwConcurrentCalls(t *testing.T, c *lock.Client, wait bool) ([]error, *sectionProbe) {
	t.Helper()
	const calls = 3
	probe := &sectionProbe{}
	wrapped, err := lock.Middleware(c, func(_ context.Context, i int) (int, error) {
		probe.section(!wait, calls)
		return i, nil
	}, lock.MiddlewareOptions[int]{Name: uniqueName(t), Options: lock.Options{Wait: wait}})
	require.NoError(t, err)

	ctx := ctxTimeout(t, 10*time.Second)
	return probe.together(calls, func(i int) error {
		res, err := wrapped(ctx, i)
		if err == nil && res != i {
			err = errors.New("wrong result " + strconv.Itoa(res))
		}
		return err
	}), probe
}

// Alepha test 11: three concurrent calls on one instance, no Wait: at most one
// inside at any time, exactly one succeeds.
func TestMiddleware_ConcurrentCallsNoWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		errs, probe := mwConcurrentCalls(t, newClient(t, b.replica(t)), false)

		assert.EqualValues(t, 1, probe.most.Load(), "at most one call should be inside at any time")
		var ok int
		for i, err := range errs {
			if err == nil {
				ok++
				continue
			}
			assert.ErrorIs(t, err, lock.ErrHeld, "call %d should fail because the lock was held", i)
		}
		assert.Equal(t, 1, ok, "exactly one call should succeed; errors: %v", errs)
		assert.EqualValues(t, 1, probe.entered.Load(), "only the successful call should run the handler")
	})
}

// With Wait, the three concurrent calls all succeed, one at a time.
func TestMiddleware_ConcurrentCallsWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		errs, probe := mwConcurrentCalls(t, newClient(t, b.replica(t)), true)

		assert.EqualValues(t, 1, probe.most.Load(), "at most one call should be inside at any time")
		for i, err := range errs {
			assert.NoError(t, err, "call %d should succeed after waiting", i)
		}
		assert.EqualValues(t, 3, probe.entered.Load(), "every call should run the handler in turn")
	})
}

// Every call acquires with an owner of its own (Alepha's bug P0-1 was one
// shared id, with which every concurrent caller "acquired").
func TestMiddleware_FreshOwnerPerCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		rec := newRecorder()
		c := newClient(t, b.replica(t), rec.option())
		errs, _ := mwConcurrentCalls(t, c, true)
		for i, err := range errs {
			require.NoError(t, err, "call %d should succeed after waiting", i)
		}

		owners := map[string]bool{}
		for _, e := range drain(rec) {
			if e.Kind == lock.EventAcquired {
				assert.NotEmpty(t, e.Owner, "Acquired should name its owner")
				owners[e.Owner] = true
			}
		}
		assert.Len(t, owners, 3, "three calls should acquire with three distinct owners")
	})
}

// Bad configuration is an error matching ErrInvalidArgument, never a panic.
func TestMiddleware_InvalidArguments(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ok := func(context.Context, int) (int, error) { return 1, nil }
	name := uniqueName(t)

	for _, tc := range []struct {
		what string
		c    *lock.Client
		next func(context.Context, int) (int, error)
		opts lock.MiddlewareOptions[int]
	}{
		{"no name", c, ok, lock.MiddlewareOptions[int]{}},
		{"nil handler", c, nil, lock.MiddlewareOptions[int]{Name: name}},
		{"nil client", nil, ok, lock.MiddlewareOptions[int]{Name: name}},
		{"negative MaxDuration", c, ok, lock.MiddlewareOptions[int]{Name: name, Options: lock.Options{MaxDuration: -1}}},
		{"negative Lease", c, ok, lock.MiddlewareOptions[int]{Name: name, Options: lock.Options{Lease: -1}}},
		{"negative GracePeriod", c, ok, lock.MiddlewareOptions[int]{Name: name, Options: lock.Options{GracePeriod: -1}}},
		{"name over MaxKeyLen", c, ok, lock.MiddlewareOptions[int]{Name: strings.Repeat("n", lock.MaxKeyLen)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var wrapped func(context.Context, int) (int, error)
			var err error
			require.NotPanics(t, func() { wrapped, err = lock.Middleware(tc.c, tc.next, tc.opts) }, "Middleware must not panic on bad input")
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Middleware should reject %s", tc.what)
			assert.Nil(t, wrapped, "Middleware should return no handler with an error")
		})
	}

	t.Run("NameFunc returns empty", func(t *testing.T) {
		var runs atomic.Int32
		wrapped, err := lock.Middleware(c, func(context.Context, int) (int, error) { runs.Add(1); return 1, nil },
			lock.MiddlewareOptions[int]{NameFunc: func(int) string { return "" }})
		require.NoError(t, err)
		_, err = wrapped(ctxTimeout(t, 5*time.Second), 1)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "an empty derived name should fail the call")
		assert.Zero(t, runs.Load(), "the handler must not run without a name")
	})
}
