package faults_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// TestRedisUnreachable points a client at a loopback port where nothing
// listens: Acquire and Do fail with a clear error within the caller's
// deadline, the handler does not run, and nothing is left running.
func TestRedisUnreachable(t *testing.T) {
	faults.RequireRedis(t) // the same conditions as the other tests
	defer goleak.VerifyNone(t)
	port, err := faults.FreePort()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	fault(t, "no Redis at "+addr)

	const releaseTimeout = 500 * time.Millisecond
	// check runs Acquire and Do, with and without Wait, with a deadline of
	// timeout, and checks their errors with clear.
	check := func(t *testing.T, rc *redis.Client, timeout time.Duration, clear func(error) bool) {
		c, err := lock.NewClient(lock.NewRedisProvider(rc),
			lock.WithPollInterval(50*time.Millisecond), lock.WithReleaseTimeout(releaseTimeout))
		require.NoError(t, err)
		defer c.Close()
		// The deadline, or the release timeout that the clean-up of a failed
		// attempt may add, plus slack.
		bound := timeout + releaseTimeout + slack
		for _, wait := range []bool{false, true} {
			o := lock.Options{Wait: wait, Lease: time.Second, MaxDuration: 10 * time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			start := time.Now()
			l, err := c.Acquire(ctx, "unreachable", o)
			took := time.Since(start)
			cancel()
			t.Logf("Acquire (wait %v): %v after %v", wait, err, took.Round(time.Millisecond))
			expect(t, l == nil, "Acquire (wait %v) granted a lock with no Redis", wait)
			expect(t, clear(err), "Acquire (wait %v) returned %v, want an error that says Redis failed", wait, err)
			expect(t, took < bound, "Acquire (wait %v) returned after %v, want < %v", wait, took, bound)

			var ran atomic.Bool
			ctx, cancel = context.WithTimeout(context.Background(), timeout)
			start = time.Now()
			err = c.Do(ctx, "unreachable", o, func(context.Context) error { ran.Store(true); return nil })
			took = time.Since(start)
			cancel()
			t.Logf("Do (wait %v): %v after %v", wait, err, took.Round(time.Millisecond))
			expect(t, !ran.Load(), "Do (wait %v) ran its handler with no Redis", wait)
			expect(t, clear(err), "Do (wait %v) returned %v, want an error that says Redis failed", wait, err)
			expect(t, took < bound, "Do (wait %v) returned after %v, want < %v", wait, took, bound)
		}
	}

	t.Run("refused-before-deadline", func(t *testing.T) {
		// go-redis gives up at once: the caller gets its error, not a
		// "not acquired" that would say someone else holds the lock.
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			DialTimeout: time.Second, DialerRetries: 1, MaxRetries: -1})
		defer rc.Close()
		check(t, rc, 2*time.Second, func(err error) bool {
			return err != nil && !errors.Is(err, lock.ErrNotAcquired) && strings.Contains(err.Error(), "connection refused") &&
				strings.Contains(err.Error(), `"lock:{unreachable}"`)
		})
	})

	t.Run("deadline-before-refused", func(t *testing.T) {
		// go-redis retries the dial (5 dials x 100ms, 3 retries: about 2s)
		// past the caller's deadline. The caller's deadline ended the
		// acquisition: a *NotAcquiredError whose reason is the context's
		// error, naming the lock.
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rc.Close()
		check(t, rc, time.Second, func(err error) bool {
			var na *lock.NotAcquiredError
			return errors.As(err, &na) && errors.Is(err, context.DeadlineExceeded) &&
				strings.Contains(err.Error(), `"lock:{unreachable}"`)
		})
	})
}
