package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// httpServe serves one request through h and returns the response.
func httpServe(t *testing.T, ctx context.Context, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, method, target, nil))
	return w
}

// httpCounted returns a handler that counts its calls and answers 200.
func httpCounted(calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) })
}

// assertHidesInternals checks that a refusal's body is the status text alone,
// naming none of secrets (the lock's key and name, the provider's error).
func assertHidesInternals(t *testing.T, resp *httptest.ResponseRecorder, secrets ...string) {
	t.Helper()
	body := resp.Body.String()
	assert.Equal(t, http.StatusText(resp.Code)+"\n", body, "the body should be the status text alone")
	for _, s := range secrets {
		assert.NotContains(t, body, s, "the body must not show internals")
	}
}

// The lock is named from the request's path value, and the handler runs under
// it.
func TestHTTPMiddleware_NameFromPathValue(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		base := uniqueName(t)
		c := newClient(t, b.replica(t))
		mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{NameFunc: func(r *http.Request) string { return base + ":order:" + r.PathValue("id") }})
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

		resp := httpServe(t, ctxTimeout(t, 5*time.Second), mux, http.MethodPost, "/orders/42")

		assert.Equal(t, http.StatusOK, resp.Code, "a request on a free lock should be served; body: %s", resp.Body)
		assert.Equal(t, c.Key(base+":order:42"), key, "the handler should hold the lock named from the path value")
		assert.Positive(t, token, "the handler's lock should carry a fencing token")
	})
}

// Name gives one lock for every request.
func TestHTTPMiddleware_FixedName(t *testing.T) {
	name := uniqueName(t)
	c := newClient(t, lock.NewMemoryProvider())
	mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{Name: name})
	require.NoError(t, err)
	var key string
	h := mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if l, ok := lock.FromContext(r.Context()); ok {
			key = l.Key()
		}
	}))

	resp := httpServe(t, ctxTimeout(t, 5*time.Second), h, http.MethodPost, "/reindex")

	assert.Equal(t, http.StatusOK, resp.Code, "a request on a free lock should be served; body: %s", resp.Body)
	assert.Equal(t, c.Key(name), key, "the handler should hold the lock called Name")
}

// The lock is named from the URL path; a request for a held lock is answered
// 423 Locked with Retry-After and a body that does not name the lock, without
// calling the handler.
func TestHTTPMiddleware_LockedWhileHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		base := uniqueName(t)
		cs := replicas(t, b, 2)
		ctx := ctxTimeout(t, 5*time.Second)
		mw, err := lock.HTTPMiddleware(cs[1], lock.HTTPOptions{NameFunc: func(r *http.Request) string { return base + r.URL.Path }})
		require.NoError(t, err)
		var served []string
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l, ok := lock.FromContext(r.Context())
			if assert.True(t, ok, "the handler's context should carry the lock") {
				served = append(served, l.Key())
			}
		}))
		mustHold(t, cs[0], base+"/reports/daily")

		resp := httpServe(t, ctx, h, http.MethodGet, "/reports/daily")
		assert.Equal(t, http.StatusLocked, resp.Code, "a request for a held lock should be answered 423; body: %s", resp.Body)
		assert.Equal(t, "1", resp.Header().Get("Retry-After"), "a lock held by another should suggest a retry in a second")
		assertHidesInternals(t, resp, base, cs[1].Key(base+"/reports/daily"))
		assert.Empty(t, served, "the handler must not be called without the lock")

		resp = httpServe(t, ctx, h, http.MethodGet, "/reports/weekly")
		assert.Equal(t, http.StatusOK, resp.Code, "another path is another lock; body: %s", resp.Body)
		assert.Equal(t, []string{cs[1].Key(base + "/reports/weekly")}, served, "only the free path should be served")
	})
}

// Retry-After is 1 for a lock held by another (whatever its lease, waited for
// or not) and the rest of the grace period, rounded up, for a lock in one.
func TestHTTPMiddleware_RetryAfter(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	serve := func(t *testing.T, c *lock.Client, name string, o lock.Options) *httptest.ResponseRecorder {
		t.Helper()
		mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{Name: name, Options: o})
		require.NoError(t, err)
		var calls atomic.Int32
		resp := httpServe(t, ctx, mw(httpCounted(&calls)), http.MethodPost, "/run")
		require.Equal(t, http.StatusLocked, resp.Code, "a refused request should be answered 423; body: %s", resp.Body)
		assert.Zero(t, calls.Load(), "the handler must not be called without the lock")
		return resp
	}

	t.Run("held with a long lease", func(t *testing.T) {
		c := newClient(t, lock.NewMemoryProvider())
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{Lease: time.Minute})
		require.NoError(t, err)
		defer func() { assert.NoError(t, l.Release(ctx)) }()

		resp := serve(t, c, name, lock.Options{})
		assert.Equal(t, "1", resp.Header().Get("Retry-After"), "the holder's lease says nothing about when it finishes")
	})

	t.Run("wait timed out", func(t *testing.T) {
		c := newClient(t, lock.NewMemoryProvider())
		name := uniqueName(t)
		mustHold(t, c, name)

		resp := serve(t, c, name, lock.Options{Wait: true, MaxDuration: 50 * time.Millisecond})
		assert.Equal(t, "1", resp.Header().Get("Retry-After"), "a wait that timed out on a held lock should suggest a retry in a second")
	})

	t.Run("grace period", func(t *testing.T) {
		clock := testenv.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		c := newClient(t, lock.NewMemoryProvider(lock.MemoryClock(clock)))
		name := uniqueName(t)
		require.NoError(t, c.Do(ctx, name, lock.Options{GracePeriod: 2500 * time.Millisecond}, func(context.Context) error { return nil }))

		for _, step := range []struct {
			advance time.Duration
			want    string
		}{
			{0, "3"},                       // 2.5 s left
			{500 * time.Millisecond, "2"},  // 2 s left
			{1900 * time.Millisecond, "1"}, // 100 ms left
		} {
			clock.Advance(step.advance)
			resp := serve(t, c, name, lock.Options{})
			assert.Equal(t, step.want, resp.Header().Get("Retry-After"),
				"Retry-After should be the rest of the grace period rounded up to seconds (after %v more)", step.advance)
		}
	})
}

// A request that the name function gives no name is answered 400.
func TestHTTPMiddleware_EmptyNameIsBadRequest(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{NameFunc: func(r *http.Request) string { return r.URL.Query().Get("job") }})
	require.NoError(t, err)
	var calls atomic.Int32

	resp := httpServe(t, ctxTimeout(t, 5*time.Second), mw(httpCounted(&calls)), http.MethodPost, "/run")

	assert.Equal(t, http.StatusBadRequest, resp.Code, "a request with no lock name should be answered 400; body: %s", resp.Body)
	assertHidesInternals(t, resp, "lock:")
	assert.Empty(t, resp.Header().Get("Retry-After"), "a 400 is not a held lock")
	assert.Zero(t, calls.Load(), "the handler must not be called without a lock")
}

// httpUnreachable returns a Client whose provider is a Redis client that
// cannot connect, made with opt (Addr defaults to a closed loopback port).
func httpUnreachable(t *testing.T, opt redis.Options) *lock.Client {
	t.Helper()
	if opt.Addr == "" {
		opt.Addr = "127.0.0.1:1" // nothing listens on port 1
	}
	rc := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rc.Close() })
	return newClient(t, lock.NewRedisProvider(rc))
}

// httpDownClient returns a Client on a provider that is down (see
// mwDownProvider), whose cleanup gives up after a second.
func httpDownClient(t *testing.T) *lock.Client {
	return newClient(t, mwDownProvider(lock.NewMemoryProvider()), lock.WithReleaseTimeout(time.Second))
}

// httpServeOnce serves one request under c's lock, named name, with the given
// deadline and returns the response, how long it took and how often the
// handler ran.
func httpServeOnce(t *testing.T, c *lock.Client, name string, deadline time.Duration) (*httptest.ResponseRecorder, time.Duration, int32) {
	t.Helper()
	mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{Name: name})
	require.NoError(t, err)
	var calls atomic.Int32
	began := time.Now()
	resp := httpServe(t, ctxTimeout(t, deadline), mw(httpCounted(&calls)), http.MethodPost, "/run")
	return resp, time.Since(began), calls.Load()
}

// A request that cannot reach the provider (connection refused) is answered
// 503 with a body that does not show the provider's error, without calling
// the handler.
func TestHTTPMiddleware_ProviderUnreachable(t *testing.T) {
	const deadline = 2 * time.Second
	// Fail fast: one refused dial per command, no retries.
	c := httpUnreachable(t, redis.Options{DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	name := uniqueName(t)

	resp, elapsed, calls := httpServeOnce(t, c, name, deadline)

	assert.Equal(t, http.StatusServiceUnavailable, resp.Code, "an unreachable provider should be answered 503; body: %s", resp.Body)
	assertHidesInternals(t, resp, "127.0.0.1", "refused", "dial", name)
	assert.Empty(t, resp.Header().Get("Retry-After"), "a 503 for an unreachable provider is not a held lock")
	assert.Less(t, elapsed, deadline, "the answer should come within the request's deadline")
	assert.Zero(t, calls, "the handler must not be called without a lock")
}

// A provider failure found before the request's deadline stays a provider
// failure (503), even when dealing with it outlasts the deadline, and the
// request is answered by its deadline, with a body that does not show the
// failure.
func TestHTTPMiddleware_ProviderDownShortDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	name := uniqueName(t)

	resp, elapsed, calls := httpServeOnce(t, httpDownClient(t), name, deadline)

	assert.Equal(t, http.StatusServiceUnavailable, resp.Code,
		"a provider that is down should be answered 503, not as a held lock; body: %s", resp.Body)
	assertHidesInternals(t, resp, errMwDown.Error(), "10.20.30.40", name)
	// Waiting for the clean-up (the 1 s release timeout) would take 1.1 s.
	assert.Less(t, elapsed, deadline+600*time.Millisecond, "the answer should come by the request's deadline, not after the clean-up")
	assert.Zero(t, calls, "the handler must not be called without a lock")
}

// A custom ErrorHandler answers every refusal, and gets the full error: for a
// held lock a *NotAcquiredError naming the key, for a failed provider its
// error, for no name ErrInvalidArgument.
func TestHTTPMiddleware_ErrorHandler(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	mem := newClient(t, lock.NewMemoryProvider())
	held := uniqueName(t)
	mustHold(t, mem, held)

	for _, tc := range []struct {
		what  string
		c     *lock.Client
		name  string
		check func(t *testing.T, err error)
	}{
		{"held", mem, held, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, lock.ErrNotAcquired, "a held lock should be reported as not acquired")
			assert.ErrorIs(t, err, lock.ErrHeld, "the reason should be that the lock is held")
			var na *lock.NotAcquiredError
			if assert.ErrorAs(t, err, &na, "the error should carry the details") {
				assert.Equal(t, mem.Key(held), na.Key, "the error should name the key, for the log")
			}
		}},
		{"provider down", httpDownClient(t), uniqueName(t), func(t *testing.T, err error) {
			assert.ErrorIs(t, err, errMwDown, "the provider's error should reach the handler, for the log")
		}},
		{"empty name", mem, "", func(t *testing.T, err error) {
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "an empty name should be reported as an invalid argument")
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var got []error
			mw, err := lock.HTTPMiddleware(tc.c, lock.HTTPOptions{
				NameFunc: func(*http.Request) string { return tc.name },
				ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
					got = append(got, err)
					http.Error(w, "try later", http.StatusTooManyRequests)
				},
			})
			require.NoError(t, err)
			var calls atomic.Int32

			resp := httpServe(t, ctx, mw(httpCounted(&calls)), http.MethodPost, "/run")

			assert.Equal(t, http.StatusTooManyRequests, resp.Code, "the ErrorHandler should answer; body: %s", resp.Body)
			assert.Equal(t, "try later\n", resp.Body.String(), "the ErrorHandler's body should be sent")
			assert.Empty(t, resp.Header().Get("Retry-After"), "the ErrorHandler alone should set headers")
			assert.Zero(t, calls.Load(), "the handler must not be called without a lock")
			if assert.Len(t, got, 1, "the ErrorHandler should be called once") {
				tc.check(t, got[0])
			}
		})
	}
}

// A served request does not reach the ErrorHandler.
func TestHTTPMiddleware_ErrorHandlerNotCalledWhenServed(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	var errs atomic.Int32
	mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{
		Name:         uniqueName(t),
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { errs.Add(1) },
	})
	require.NoError(t, err)
	var calls atomic.Int32

	resp := httpServe(t, ctxTimeout(t, 5*time.Second), mw(httpCounted(&calls)), http.MethodPost, "/run")

	assert.Equal(t, http.StatusOK, resp.Code, "a request on a free lock should be served; body: %s", resp.Body)
	assert.EqualValues(t, 1, calls.Load(), "the handler should run once")
	assert.Zero(t, errs.Load(), "the ErrorHandler should not be called for a served request")
}

// WriteHTTPError, called from a custom ErrorHandler, gives the default
// answer.
func TestWriteHTTPError(t *testing.T) {
	for _, tc := range []struct {
		what  string
		err   error
		code  int
		retry string
	}{
		{"held", &lock.NotAcquiredError{Key: "lock:k", Reason: lock.ErrHeld, RetryAfter: time.Minute}, http.StatusLocked, "1"},
		{"timed out", &lock.NotAcquiredError{Key: "lock:k", Reason: lock.ErrTimeout, RetryAfter: time.Minute}, http.StatusLocked, "1"},
		{"grace period", &lock.NotAcquiredError{Key: "lock:k", Reason: lock.ErrGracePeriod, RetryAfter: 4001 * time.Millisecond}, http.StatusLocked, "5"},
		{"grace period, unknown rest", &lock.NotAcquiredError{Key: "lock:k", Reason: lock.ErrGracePeriod}, http.StatusLocked, "1"},
		{"context ended", &lock.NotAcquiredError{Key: "lock:k", Reason: context.Canceled}, http.StatusServiceUnavailable, ""},
		{"invalid argument", errors.Join(lock.ErrInvalidArgument, errors.New("empty lock name")), http.StatusBadRequest, ""},
		{"provider", errMwDown, http.StatusServiceUnavailable, ""},
		{"timed out, provider unavailable", &lock.NotAcquiredError{Key: "lock:k", Reason: errors.Join(lock.ErrTimeout, lock.ErrUnavailable)}, http.StatusServiceUnavailable, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			w := httptest.NewRecorder()
			lock.WriteHTTPError(w, httptest.NewRequest(http.MethodPost, "/run", nil), tc.err)

			assert.Equal(t, tc.code, w.Code, "status for %v", tc.err)
			assert.Equal(t, tc.retry, w.Header().Get("Retry-After"), "Retry-After for %v", tc.err)
			assertHidesInternals(t, w, "lock:k", errMwDown.Error(), "empty lock name")
		})
	}
}

// Bad configuration is an error matching ErrInvalidArgument.
func TestHTTPMiddleware_InvalidArguments(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	name := func(*http.Request) string { return "x" }
	for _, tc := range []struct {
		what string
		c    *lock.Client
		opts lock.HTTPOptions
	}{
		{"no name", c, lock.HTTPOptions{}},
		{"nil client", nil, lock.HTTPOptions{NameFunc: name}},
		{"negative MaxDuration", c, lock.HTTPOptions{NameFunc: name, Options: lock.Options{MaxDuration: -1}}},
		{"negative GracePeriod", c, lock.HTTPOptions{Name: "x", Options: lock.Options{GracePeriod: -1}}},
		{"name over MaxKeyLen", c, lock.HTTPOptions{Name: strings.Repeat("n", lock.MaxKeyLen)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var mw func(http.Handler) http.Handler
			var err error
			require.NotPanics(t, func() { mw, err = lock.HTTPMiddleware(tc.c, tc.opts) }, "HTTPMiddleware must not panic on bad input")
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "HTTPMiddleware should reject %s", tc.what)
			assert.Nil(t, mw, "HTTPMiddleware should return no middleware with an error")
		})
	}
}

// Issue 22, item 4: with Wait and no MaxWait, a request waits at most
// DefaultHTTPMaxWait for a held lock (it waited up to MaxDuration's default,
// an hour); a MaxWait or a shorter MaxDuration of the user's wins.
func TestHTTPMiddleware_WaitBoundedByDefault(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	name := uniqueName(t)
	mustHold(t, c, name)
	for _, tc := range []struct {
		what string
		o    lock.Options
		want time.Duration
	}{
		{"default", lock.Options{Wait: true}, lock.DefaultHTTPMaxWait},
		{"MaxWait", lock.Options{Wait: true, MaxWait: 200 * time.Millisecond, MaxDuration: time.Hour}, 200 * time.Millisecond},
		{"shorter MaxDuration", lock.Options{Wait: true, MaxDuration: 300 * time.Millisecond}, 300 * time.Millisecond},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if tc.want == lock.DefaultHTTPMaxWait {
				testenv.SkipShort(t, "waits out DefaultHTTPMaxWait (5 s); the other cases check the bound")
			}
			mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{Name: name, Options: tc.o})
			require.NoError(t, err)
			var calls atomic.Int32
			began := time.Now()
			resp := httpServe(t, ctxTimeout(t, 3*lock.DefaultHTTPMaxWait), mw(httpCounted(&calls)), http.MethodPost, "/run")
			took := time.Since(began)

			assert.Equal(t, http.StatusLocked, resp.Code, "a wait that timed out is answered 423; body: %s", resp.Body)
			assert.GreaterOrEqual(t, took, tc.want-tc.want/10, "the request waits for the lock until its bound")
			assert.Less(t, took, tc.want+2*time.Second, "the request waits no longer than its bound")
			assert.Zero(t, calls.Load(), "the handler must not be called without the lock")
		})
	}
}

// Issue 22, item 4: the default ErrorHandler logs what it refuses through
// the Client's logger: a provider failure (503) at warning level, a held
// lock (423) and a bad name (400) at debug level.
func TestHTTPMiddleware_DefaultHandlerLogs(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var mode atomic.Value
	c := newClient(t, downProvider(lock.NewMemoryProvider(), &mode), lock.WithLogger(log), lock.WithReleaseTimeout(time.Second))
	held := uniqueName(t)
	mustHold(t, c, held)
	mw, err := lock.HTTPMiddleware(c, lock.HTTPOptions{NameFunc: func(r *http.Request) string { return r.URL.Query().Get("name") }})
	require.NoError(t, err)
	var calls atomic.Int32
	h := mw(httpCounted(&calls))

	resp := httpServe(t, ctx, h, http.MethodPost, "/run?name="+held)
	require.Equal(t, http.StatusLocked, resp.Code)
	resp = httpServe(t, ctx, h, http.MethodPost, "/run?name=")
	require.Equal(t, http.StatusBadRequest, resp.Code)
	mode.Store("fail")
	resp = httpServe(t, ctx, h, http.MethodPost, "/run?name=other")
	require.Equal(t, http.StatusServiceUnavailable, resp.Code)
	assertHidesInternals(t, resp, errDown.Error())

	lines := buf.lines(`msg="lock: request not served"`)
	require.Len(t, lines, 3, "each refusal is logged once:\n%s", buf.String())
	assert.Contains(t, lines[0], "level=DEBUG", "a held lock is logged at debug level")
	assert.Contains(t, lines[0], "status=423")
	assert.Contains(t, lines[0], "held by this Client", "c holds it")
	assert.Contains(t, lines[1], "level=DEBUG", "a bad name is logged at debug level")
	assert.Contains(t, lines[1], "status=400")
	assert.Contains(t, lines[2], "level=WARN", "a provider failure is logged at warning level")
	assert.Contains(t, lines[2], "status=503")
	assert.Contains(t, lines[2], "path=/run")
	assert.Contains(t, lines[2], errDown.Error(), "the log says the provider's error")
	assert.Zero(t, calls.Load())
}
