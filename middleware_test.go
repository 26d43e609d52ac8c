package lock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// The tests of this file port Alepha's middleware test (alepha-behaviour.md,
// test 11) to lock.Middleware, and check HTTPMiddleware.

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
		primHold(t, cs[0], base+":order:1")

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
		primHold(t, cs[0], name)
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
func mwConcurrentCalls(t *testing.T, c *lock.Client, wait bool) ([]error, *primProbe) {
	t.Helper()
	const calls = 3
	probe := &primProbe{}
	var failed atomic.Int32
	wrapped, err := lock.Middleware(c, func(_ context.Context, i int) (int, error) {
		defer probe.enter()()
		time.Sleep(30 * time.Millisecond)
		if !wait {
			primWaitUntil(func() bool { return failed.Load() >= calls-1 }, 2*time.Second)
		}
		return i, nil
	}, lock.MiddlewareOptions[int]{Name: uniqueName(t), Options: lock.Options{Wait: wait}})
	require.NoError(t, err)

	ctx := ctxTimeout(t, 10*time.Second)
	errs := make([]error, calls)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var res int
			res, errs[i] = wrapped(ctx, i)
			if errs[i] != nil {
				failed.Add(1)
			} else if res != i {
				errs[i] = errors.New("wrong result " + strconv.Itoa(res))
			}
		}()
	}
	close(start)
	wg.Wait()
	return errs, probe
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
		for _, e := range primEvents(rec) {
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

// mwServe serves one request through h and returns the response.
func mwServe(t *testing.T, ctx context.Context, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, method, target, nil))
	return w
}

// The lock is named from the request's path value, and the handler runs under
// it.
func TestHTTPMiddleware_NameFromPathValue(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		base := uniqueName(t)
		c := newClient(t, b.replica(t))
		mw, err := lock.HTTPMiddleware(c, func(r *http.Request) string { return base + ":order:" + r.PathValue("id") }, lock.Options{})
		require.NoError(t, err)
		var key string
		var token uint64
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if l, ok := lock.FromContext(r.Context()); ok {
				key, token = l.Key(), l.Token()
			}
			w.WriteHeader(http.StatusOK)
		})))

		resp := mwServe(t, ctxTimeout(t, 5*time.Second), mux, http.MethodPost, "/orders/42")

		assert.Equal(t, http.StatusOK, resp.Code, "a request on a free lock should be served; body: %s", resp.Body)
		assert.Equal(t, c.Key(base+":order:42"), key, "the handler should hold the lock named from the path value")
		assert.Positive(t, token, "the handler's lock should carry a fencing token")
	})
}

// The lock is named from the URL path; a request for a held lock is answered
// 423 Locked with Retry-After, without calling the handler.
func TestHTTPMiddleware_LockedWhileHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		base := uniqueName(t)
		cs := replicas(t, b, 2)
		ctx := ctxTimeout(t, 5*time.Second)
		mw, err := lock.HTTPMiddleware(cs[1], func(r *http.Request) string { return base + r.URL.Path }, lock.Options{})
		require.NoError(t, err)
		var served []string
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l, ok := lock.FromContext(r.Context())
			if assert.True(t, ok, "the handler's context should carry the lock") {
				served = append(served, l.Key())
			}
		}))
		primHold(t, cs[0], base+"/reports/daily")

		resp := mwServe(t, ctx, h, http.MethodGet, "/reports/daily")
		assert.Equal(t, http.StatusLocked, resp.Code, "a request for a held lock should be answered 423; body: %s", resp.Body)
		retry, err := strconv.Atoi(resp.Header().Get("Retry-After"))
		if assert.NoError(t, err, "Retry-After should be a number of seconds, got %q", resp.Header().Get("Retry-After")) {
			assert.GreaterOrEqual(t, retry, 1, "Retry-After should be at least one second")
		}
		assert.Empty(t, served, "the handler must not be called without the lock")

		resp = mwServe(t, ctx, h, http.MethodGet, "/reports/weekly")
		assert.Equal(t, http.StatusOK, resp.Code, "another path is another lock; body: %s", resp.Body)
		assert.Equal(t, []string{cs[1].Key(base + "/reports/weekly")}, served, "only the free path should be served")
	})
}

// A request that the name function gives no name is answered 400.
func TestHTTPMiddleware_EmptyNameIsBadRequest(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	mw, err := lock.HTTPMiddleware(c, func(r *http.Request) string { return r.URL.Query().Get("job") }, lock.Options{})
	require.NoError(t, err)
	var calls atomic.Int32
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))

	resp := mwServe(t, ctxTimeout(t, 5*time.Second), h, http.MethodPost, "/run")

	assert.Equal(t, http.StatusBadRequest, resp.Code, "a request with no lock name should be answered 400; body: %s", resp.Body)
	assert.Zero(t, calls.Load(), "the handler must not be called without a lock")
}

// mwUnreachable returns a Client whose provider is a Redis client that cannot
// connect, made with opt (Addr defaults to a closed loopback port).
func mwUnreachable(t *testing.T, opt redis.Options) *lock.Client {
	t.Helper()
	if opt.Addr == "" {
		opt.Addr = "127.0.0.1:1" // nothing listens on port 1
	}
	rc := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rc.Close() })
	return newClient(t, lock.NewRedisProvider(rc))
}

// mwServeUnreachable serves one request under c's lock with the given deadline
// and returns the response, how long it took and how often the handler ran.
func mwServeUnreachable(t *testing.T, c *lock.Client, deadline time.Duration) (*httptest.ResponseRecorder, time.Duration, int32) {
	t.Helper()
	mw, err := lock.HTTPMiddleware(c, func(*http.Request) string { return uniqueName(t) }, lock.Options{})
	require.NoError(t, err)
	var calls atomic.Int32
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	began := time.Now()
	resp := mwServe(t, ctxTimeout(t, deadline), h, http.MethodPost, "/run")
	return resp, time.Since(began), calls.Load()
}

// A request that cannot reach the provider (connection refused) is answered
// 503, without calling the handler.
func TestHTTPMiddleware_ProviderUnreachable(t *testing.T) {
	const deadline = 2 * time.Second
	// Fail fast: one refused dial per command, no retries.
	c := mwUnreachable(t, redis.Options{DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})

	resp, elapsed, calls := mwServeUnreachable(t, c, deadline)

	assert.Equal(t, http.StatusServiceUnavailable, resp.Code, "an unreachable provider should be answered 503; body: %s", resp.Body)
	assert.Empty(t, resp.Header().Get("Retry-After"), "a 503 for an unreachable provider is not a held lock")
	assert.Less(t, elapsed, deadline, "the answer should come within the request's deadline")
	assert.Zero(t, calls, "the handler must not be called without a lock")
}

// mwDownProvider is a provider whose server is down: Acquire fails after
// 100 ms, and Release hangs until its context ends (a dial that never
// completes).
type mwDownProvider struct{}

var errMwDown = errors.New("provider down")

func (mwDownProvider) Acquire(ctx context.Context, _, _ string, _ time.Duration) (lock.Record, error) {
	select {
	case <-time.After(100 * time.Millisecond):
		return lock.Record{}, errMwDown
	case <-ctx.Done():
		return lock.Record{}, ctx.Err()
	}
}

func (mwDownProvider) Release(ctx context.Context, _, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}

func (mwDownProvider) Update(ctx context.Context, _, _ string, _ time.Duration, _ bool) error {
	<-ctx.Done()
	return ctx.Err()
}

func (p mwDownProvider) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	return p.Acquire(ctx, key, w.Owner, w.TTL)
}

func (mwDownProvider) Leave(ctx context.Context, _ string, _ lock.Waiter) error {
	<-ctx.Done()
	return ctx.Err()
}

func (mwDownProvider) Listen(context.Context, string, func(lock.Grant)) (func(), error) {
	return nil, errMwDown
}

// A provider failure found before the request's deadline stays a provider
// failure (503), even when dealing with it outlasts the deadline, and the
// request is answered by its deadline.
func TestHTTPMiddleware_ProviderDownShortDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	c := newClient(t, mwDownProvider{}, lock.WithReleaseTimeout(time.Second))

	resp, elapsed, calls := mwServeUnreachable(t, c, deadline)

	assert.Equal(t, http.StatusServiceUnavailable, resp.Code,
		"a provider that is down should be answered 503, not as a held lock; body: %s", resp.Body)
	assert.Contains(t, resp.Body.String(), errMwDown.Error(), "the answer should say what failed")
	assert.Less(t, elapsed, deadline+200*time.Millisecond, "the answer should come by the request's deadline")
	assert.Zero(t, calls, "the handler must not be called without a lock")
}

// Bad configuration is an error matching ErrInvalidArgument.
func TestHTTPMiddleware_InvalidArguments(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	name := func(*http.Request) string { return "x" }
	for _, tc := range []struct {
		what string
		c    *lock.Client
		name func(*http.Request) string
		opts lock.Options
	}{
		{"nil name function", c, nil, lock.Options{}},
		{"nil client", nil, name, lock.Options{}},
		{"negative MaxDuration", c, name, lock.Options{MaxDuration: -1}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var mw func(http.Handler) http.Handler
			var err error
			require.NotPanics(t, func() { mw, err = lock.HTTPMiddleware(tc.c, tc.name, tc.opts) }, "HTTPMiddleware must not panic on bad input")
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "HTTPMiddleware should reject %s", tc.what)
			assert.Nil(t, mw, "HTTPMiddleware should return no middleware with an error")
		})
	}
}
